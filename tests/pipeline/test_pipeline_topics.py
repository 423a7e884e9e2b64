"""format("kafka_topic"): batch read in Spark's Kafka schema, batch and streaming write."""
from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from pipeline.topics import OffsetRange, split_ranges

N = 100_000
PARTS = 4
BASE_TS = 1_700_000_000_000


def record(i: int) -> dict:
    r = {"value": b"value-%d-" % i + bytes([i % 256]) * (i % 7), "partition": i % PARTS,
         "timestamp": BASE_TS + i}
    if i % 5:
        r["key"] = b"key-%d" % i
    if i % 3 == 0:
        r["headers"] = [("h", b"%d" % i), ("n", None if i % 2 else b"")]
    return r


def expected_headers(i: int):
    if i % 3:
        return None
    return [("h", b"%d" % i), ("n", None if i % 2 else b"")]


@pytest.fixture(scope="module")
def big_topic(kafka):
    topic = kafka.topic(PARTS, "read")
    kafka.produce(topic, (record(i) for i in range(N)))
    return topic


def read(spark, bootstrap, **options):
    r = spark.read.format("kafka_topic").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows_of(df) -> list[dict]:
    """The DataFrame as dicts, timestamps as epoch milliseconds (time zone free)."""
    t = df.withColumn("ts_ms", F.unix_millis("timestamp")).drop("timestamp").toArrow()
    return t.to_pylist()


def test_read_100k_records_exactly(spark, broker, big_topic):
    df = read(spark, broker.bootstrap, subscribe=big_topic)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>")]
    assert df.rdd.getNumPartitions() == PARTS  # one input partition per topic-partition
    rows = rows_of(df)
    assert len(rows) == N
    seen = set()
    for r in rows:
        # produced in order by one idempotent producer: partition p holds p, p+4, p+8, ...
        i = r["offset"] * PARTS + r["partition"]
        seen.add(i)
        want = record(i)
        assert r["topic"] == big_topic
        assert r["value"] == want["value"], i
        assert r["key"] == want.get("key"), i
        assert r["ts_ms"] == BASE_TS + i and r["timestampType"] == 1, i  # CreateTime
        hs = None if r["headers"] is None else [(h["key"], h["value"]) for h in r["headers"]]
        assert hs == expected_headers(i), i
    assert seen == set(range(N))


def test_offset_ranges_and_splitting(spark, broker, big_topic):
    per_part = N // PARTS
    starting = {big_topic: {"0": 10, "1": -2, "2": per_part - 5, "3": 100}}
    ending = {big_topic: {"0": 20, "1": 7, "2": -1, "3": 100}}
    df = read(spark, broker.bootstrap, subscribe=big_topic, startingOffsets=json.dumps(starting),
              endingOffsets=json.dumps(ending))
    got = {(r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()}
    assert got == ({(0, o) for o in range(10, 20)} | {(1, o) for o in range(0, 7)}
                   | {(2, o) for o in range(per_part - 5, per_part)})

    # assign + a split of the ranges: maxRecordsPerPartition gives several tasks per partition
    df = read(spark, broker.bootstrap, assign=json.dumps({big_topic: [1, 3]}), maxRecordsPerPartition="7000")
    assert df.rdd.getNumPartitions() == 2 * 4  # 25,000 records per partition in 7,000-record pieces
    t = df.select("partition", "offset").toArrow()
    pairs = list(zip(t.column("partition").to_pylist(), t.column("offset").to_pylist()))
    assert sorted(pairs) == [(p, o) for p in (1, 3) for o in range(per_part)]


def test_split_ranges_min_partitions():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10)]
    out = split_ranges(ranges, min_partitions=5)
    assert len(out) >= 5
    assert sum(r.end - r.start for r in out) == 1010
    for p in (0, 1):
        pieces = sorted((r.start, r.end) for r in out if r.partition == p)
        assert pieces[0][0] == 0 and all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))


def test_latest_start_is_refused_for_batch(spark, broker, big_topic):
    with pytest.raises(Exception, match="startingOffsets=latest"):
        read(spark, broker.bootstrap, subscribe=big_topic, startingOffsets="latest").count()


def source_frame(spark, n: int, partitions: int):
    return (spark.range(n, numPartitions=3)
            .select(F.col("id").cast("long").alias("id"))
            .withColumn("key", F.when(F.col("id") % 4 != 0, F.concat(F.lit("k"), F.col("id").cast("string"))
                                      .cast("binary")))
            .withColumn("value", F.concat(F.lit("payload-"), F.col("id").cast("string")).cast("binary"))
            .withColumn("partition", (F.col("id") % partitions).cast("int"))
            .withColumn("headers", F.when(F.col("id") % 3 == 0, F.array(F.struct(
                F.lit("src").alias("key"), F.col("id").cast("string").cast("binary").alias("value"))))))


def test_write_then_read_back_equals_source(spark, broker, kafka):
    topic = kafka.topic(3, "write")
    n = 10_000
    src = source_frame(spark, n, 3)
    (src.drop("id").write.format("kafka_topic").mode("append").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", topic).save())
    back = read(spark, broker.bootstrap, subscribe=topic).toArrow().to_pylist()
    want = src.toArrow().to_pylist()

    def shape(r):
        hs = None if r["headers"] is None else tuple((h["key"], h["value"]) for h in r["headers"])
        return r["key"], r["value"], r["partition"], hs

    assert sorted(map(shape, back), key=repr) == sorted(map(shape, want), key=repr)
    # idempotent producers, in order: within a partition, the ids each task wrote ascend with the offset
    by_part: dict[int, list] = {}
    for r in sorted(back, key=lambda r: (r["partition"], r["offset"])):
        by_part.setdefault(r["partition"], []).append(int(r["value"][len(b"payload-"):]))
    for p, ids in by_part.items():
        assert sorted(ids) == list(range(p, n, 3))
        for task_ids in ([i for i in ids if lo <= i < hi] for lo, hi in task_ranges(n, 3)):
            assert task_ids == sorted(task_ids)


def task_ranges(n: int, slices: int) -> list[tuple[int, int]]:
    """The id ranges spark.range(n, numPartitions=slices) gives each task."""
    return [(i * n // slices, (i + 1) * n // slices) for i in range(slices)]


def test_topic_column_routes_rows(spark, broker, kafka):
    a, b = kafka.topic(1, "route"), kafka.topic(1, "route")
    df = spark.range(100).select(F.when(F.col("id") % 2 == 0, F.lit(a)).otherwise(F.lit(b)).alias("topic"),
                                 F.col("id").cast("string").alias("value"))
    df.write.format("kafka_topic").mode("append").option("kafka.bootstrap.servers", broker.bootstrap).save()
    got_a = sorted(int(r.value) for r in read(spark, broker.bootstrap, subscribe=a).collect())
    got_b = sorted(int(r.value) for r in read(spark, broker.bootstrap, subscribe=b).collect())
    assert got_a == list(range(0, 100, 2)) and got_b == list(range(1, 100, 2))


def test_failed_produce_fails_the_task(spark, broker, kafka):
    topic = kafka.topic(2, "fail")
    df = spark.range(10).select(F.col("id").cast("string").alias("value"), F.lit(7).alias("partition"))
    with pytest.raises(Exception, match="(?i)unknown partition"):
        df.write.format("kafka_topic").mode("append").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("topic", topic).option("kafka.message.timeout.ms", "3000").save()


def test_overwrite_is_refused_and_writes_nothing(spark, broker, kafka):
    topic = kafka.topic(1, "overwrite")
    df = spark.range(3).select(F.col("id").cast("string").alias("value"))
    with pytest.raises(Exception, match="Overwrite is not allowed"):
        df.write.format("kafka_topic").mode("overwrite").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("topic", topic).save()
    assert read(spark, broker.bootstrap, subscribe=topic).count() == 0


def test_streaming_write(spark, broker, kafka, tmp_path):
    topic = kafka.topic(2, "swrite")
    src_dir = tmp_path / "in"
    src_dir.mkdir()
    for f in range(3):
        (src_dir / f"part-{f}.json").write_text("".join(json.dumps({"id": f * 100 + i}) + "\n" for i in range(100)))
    stream = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(src_dir))
              .select(F.col("id").cast("string").alias("key"), F.concat(F.lit("v"), F.col("id")).alias("value")))
    q = (stream.writeStream.format("kafka_topic").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", topic).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120), "the availableNow query did not finish"
    assert q.exception() is None
    got = sorted((r.key.decode(), r.value.decode()) for r in read(spark, broker.bootstrap, subscribe=topic).collect())
    assert got == sorted((str(i), f"v{i}") for i in range(300))
