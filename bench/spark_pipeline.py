"""Spark pipeline throughput: the kafka_topic data source and the share-worker pool against plain clients.

    python bench/spark_pipeline.py                    # 1,000,000 x 100 B records, local[2], own broker
    python bench/spark_pipeline.py --records 200000   # quicker
    python bench/spark_pipeline.py --bootstrap 127.0.0.1:9092

In one run, on one broker (started here on a free port unless --bootstrap names a loopback one):

1. plain produce: one confluent-kafka Producer (idempotent, acks=all, linger 5 ms, no per-record
   callback) produces N records of 100 B into a topic of --partitions partitions; timed from the first
   produce() to the end of flush().
2. Spark write: a cached DataFrame of N 100-byte values (generated in the JVM and cached before the
   clock starts) written with format("kafka_topic") to a second topic; timed around save().
3. plain consume: one Consumer (assign, from the beginning) reads the first topic to the end, touching
   each value; timed from assign() to the last record.
4. Spark read: format("kafka_topic") over the first topic into the "noop" sink (every column of every
   row materialised in Spark); timed around save().
5. worker pool: run_share_workers with --workers tasks and a trivial handler over --pool-records
   records (accepted records per second over the whole run: Spark job and consumer start-up, the
   Parquet output files, and the 1 s idle stop included).

Spark steps run once untimed on a small topic first (JVM and Python worker warm-up). Prints one
table and the Spark/plain ratios; --json FILE also writes the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def create_topic(admin, partitions: int, prefix: str) -> str:
    from confluent_kafka.admin import NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)
    return name


def plain_produce(bs: str, topic: str, n: int, size: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                  "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 1 << 20, "delivery.report.only.error": True})
    values = [(b"%0*d" % (size, i)) for i in range(n)]  # distinct values, made before the clock starts
    produce = p.produce
    t = time.perf_counter()
    for v in values:
        try:
            produce(topic, v)
        except BufferError:
            p.poll(0.05)
            produce(topic, v)
    left = p.flush(300)
    secs = time.perf_counter() - t
    if left:
        raise SystemExit(f"!! {left} records not delivered")
    return secs


def plain_consume(bs: str, topic: str, partitions: int, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "bench-plain", "enable.auto.commit": False,
                  "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                  "queued.max.messages.kbytes": 256 << 10})
    got = 0
    nbytes = 0
    t = time.perf_counter()
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    while got < n:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                nbytes += len(m.value())
                got += 1
    secs = time.perf_counter() - t
    c.close()
    return secs


def spark_session(master: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    from pyspark.sql import SparkSession

    import pipeline

    s = (SparkSession.builder.master(master).appName("bench-spark-pipeline")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.memory", "2g").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    pipeline.register(s)
    return s


def spark_write(spark, bs: str, topic: str, n: int, size: int, tasks: int) -> float:
    from pyspark.sql import functions as F

    df = spark.range(0, n, numPartitions=tasks).select(
        F.lpad(F.col("id").cast("string"), size, "0").cast("binary").alias("value")).cache()
    df.count()  # made before the clock starts, as the plain producer's values
    t = time.perf_counter()
    df.write.format("kafka_topic").mode("append").option("kafka.bootstrap.servers", bs).option("topic", topic).save()
    secs = time.perf_counter() - t
    df.unpersist()
    return secs


def spark_read(spark, bs: str, topic: str, n: int) -> float:
    t = time.perf_counter()
    (spark.read.format("kafka_topic").option("kafka.bootstrap.servers", bs).option("subscribe", topic).load()
     .write.format("noop").mode("overwrite").save())
    secs = time.perf_counter() - t
    got = spark.read.format("kafka_topic").option("kafka.bootstrap.servers", bs).option("subscribe", topic).load().count()
    if got != n:
        raise SystemExit(f"!! Spark read {got} records, wanted {n}")
    return secs


def set_group(admin, group: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)


def trivial(record):
    return None


def pool(spark, admin, bs: str, topic: str, workers: int, n: int) -> tuple[float, dict]:
    from pipeline.workers import run_share_workers

    group = f"bench-{uuid.uuid4().hex[:8]}"
    set_group(admin, group)
    res = run_share_workers(spark, {"bootstrap.servers": bs, "group.id": group, "max.poll.records": 2000},
                            [topic], trivial, workers=workers, idle_timeout=1.0)
    if res.totals["accepted"] != n:
        print(f"!! worker pool accepted {res.totals['accepted']} of {n}", file=sys.stderr)
    return res.seconds, res.totals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pool-records", type=int, default=200_000)
    ap.add_argument("--bootstrap", help="a running broker on 127.0.0.1 (default: start one here)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)

    from confluent_kafka.admin import AdminClient

    broker = None
    if args.bootstrap:
        if not args.bootstrap.startswith(("127.", "localhost:")):
            raise SystemExit("--bootstrap must be a loopback address")
        bs = args.bootstrap
    else:
        from broker.testing import BrokerProcess

        broker = BrokerProcess(tempfile.mkdtemp(prefix="bench-spark-")).start()
        bs = broker.bootstrap
    try:
        admin = AdminClient({"bootstrap.servers": bs})
        n, size, parts = args.records, args.size, args.partitions
        spark = spark_session(args.master)
        # warm-up: JVM, Python workers, imports
        warm = create_topic(admin, parts, "bench-warm")
        spark_write(spark, bs, warm, 20_000, size, parts)
        spark_read(spark, bs, warm, 20_000)

        figures = {}
        t1, t2 = create_topic(admin, parts, "bench-plain"), create_topic(admin, parts, "bench-spark")
        figures["plain produce"] = plain_produce(bs, t1, n, size)
        figures["Spark write"] = spark_write(spark, bs, t2, n, size, parts)
        figures["plain consume"] = plain_consume(bs, t1, parts, n)
        figures["Spark read"] = spark_read(spark, bs, t1, n)
        t3 = create_topic(admin, 2, "bench-pool")
        plain_produce(bs, t3, args.pool_records, size)
        pool_secs, totals = pool(spark, admin, bs, t3, args.workers, args.pool_records)

        rate = {k: n / v for k, v in figures.items()}
        rows = [(k, n, v, rate[k], rate[k] * size / 1e6) for k, v in figures.items()]
        rows.append((f"worker pool ({args.workers} tasks, trivial handler)", totals["accepted"], pool_secs,
                     totals["accepted"] / pool_secs, totals["accepted"] * size / pool_secs / 1e6))
        print(f"\n{n:,} records of {size} B, {parts} partitions, Spark {args.master}, broker {bs}\n")
        print(f"{'step':<44}{'records':>10}{'secs':>8}{'rec/s':>12}{'MB/s':>8}")
        for name, cnt, secs, r, mb in rows:
            print(f"{name:<44}{cnt:>10,}{secs:>8.2f}{r:>12,.0f}{mb:>8.1f}")
        write_ratio = rate["Spark write"] / rate["plain produce"]
        read_ratio = rate["Spark read"] / rate["plain consume"]
        print(f"\nSpark write / plain produce: {write_ratio:.2f}x    Spark read / plain consume: {read_ratio:.2f}x")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"records": n, "size": size, "partitions": parts, "master": args.master,
                           "seconds": figures, "pool_seconds": pool_secs, "pool": totals,
                           "write_ratio": write_ratio, "read_ratio": read_ratio}, f, indent=2)
        spark.stop()
    finally:
        if broker is not None:
            broker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
