"""Demo: a work queue on Spark and a share group, end to end, on local[2].

    python -m pipeline.demo [--bootstrap 127.0.0.1:9092] [--out DIR] [--workers 2] [--partitions 1]

1. reads ``pipeline/data/work_items.csv`` (3,000 work items) with Spark;
2. writes them as JSON work items to a topic with ``format("kafka_topic")``;
3. processes them with ``run_share_workers`` (2 Spark tasks sharing the topic's one partition: a
   share group lets more workers than partitions all work): every 9th item fails once with a timeout (retryable:
   RELEASE, delivered again), and 4 broken items (size_kb = -1) fail on every attempt, so they are
   delivered ``share.delivery.count.limit`` (3) times and then archived by the broker (a group
   with a dead-letter queue configured, see the README, would also copy them there);
4. writes the results to Parquet and prints an outcome table and the throughput.

Without ``--bootstrap`` it starts a sharebroker on a free port with a temporary data directory.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import sys
import tempfile
import time
import uuid
import zlib

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "work_items.csv")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class DownstreamTimeout(Exception):
    """The (simulated) downstream service timed out: worth another try."""


class BadItem(Exception):
    """The item can never be processed: reject it at once."""


def process(record):
    """The work: parse the item, 'render' it (a checksum stands in), return the result."""
    item = json.loads(record.value)
    if item["id"] % 9 == 0 and record.delivery_count == 1:
        raise DownstreamTimeout(f"item {item['id']}: downstream timed out")
    if item["size_kb"] < 0:
        # a broken item fails the same way every time; the handler cannot tell it from a timeout
        raise DownstreamTimeout(f"item {item['id']}: downstream timed out")
    if item["kind"] not in ("thumbnail", "invoice", "geocode", "transcode"):
        raise BadItem(f"item {item['id']}: unknown kind {item['kind']!r}")
    digest = zlib.crc32(json.dumps(item, sort_keys=True).encode())
    return {"id": item["id"], "kind": item["kind"], "customer": item["customer"],
            "cost_units": round(item["size_kb"] / 256, 2), "digest": f"{digest:08x}"}


OUTPUT_SCHEMA = "id long, kind string, customer string, cost_units double, digest string"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="a running broker (default: start one here)")
    ap.add_argument("--out", help="directory for the results (default: a new temporary directory)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=1, help="of the work topic (default 1: both workers share it)")
    args = ap.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import pipeline
    from pipeline.demo import BadItem, DownstreamTimeout, process  # by reference, also under -m
    from pipeline.workers import run_share_workers

    broker = starting = None
    if not args.bootstrap:
        from broker.testing import BrokerProcess

        broker = BrokerProcess(tempfile.mkdtemp(prefix="demo-broker-"))
        # the broker starts while Spark does (both take seconds on a busy machine)
        starting = concurrent.futures.ThreadPoolExecutor(1).submit(broker.start)
    out = args.out or tempfile.mkdtemp(prefix="demo-results-")
    spark = (SparkSession.builder.master("local[2]").appName("sharebroker-demo")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    pipeline.register(spark)
    admin = None
    try:
        bs = args.bootstrap or starting.result().bootstrap
        run = uuid.uuid4().hex[:6]
        topic, group = f"work-items-{run}", f"renderers-{run}"
        admin = AdminClient({"bootstrap.servers": bs, "log_level": 3})
        admin.create_topics([NewTopic(topic, args.partitions)])[topic].result(30)
        res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in
            {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "3"}.items()])
        admin.incremental_alter_configs([res])[res].result(30)

        items = spark.read.option("header", True).schema(
            "id long, kind string, customer string, city string, size_kb long").csv(DATA)
        all_ids = {r.id for r in items.select("id").collect()}
        n = len(all_ids)
        t = time.perf_counter()
        (items.select(F.col("id").cast("string").alias("key"), F.to_json(F.struct("*")).alias("value"))
         .write.format("kafka_topic").mode("append").option("kafka.bootstrap.servers", bs)
         # small produce batches: a share fetch hands out whole batches, so this spreads the work
         .option("kafka.batch.num.messages", "50").option("kafka.log_level", "3").option("topic", topic).save())
        write_s = time.perf_counter() - t
        print(f"\nwrote {n:,} work items to {topic} with the Spark writer in {write_s:.2f} s")

        # librdkafka logs only errors: its notices (the share consumer's preview note, telemetry) are not the demo's
        conf = {"bootstrap.servers": bs, "group.id": group, "max.poll.records": 100, "log_level": 3}
        # together: the tasks start at once and subscribe before either polls, so both share the partition
        result = run_share_workers(spark, conf, [topic], process,
                                   workers=args.workers, retryable=(DownstreamTimeout,), poison=(BadItem,),
                                   output_schema=OUTPUT_SCHEMA, idle_timeout=4.0, together=True)
        results_dir = os.path.join(out, "results.parquet")
        result.outputs.write.mode("overwrite").parquet(results_dir)
        done = spark.read.schema(result.outputs.schema).parquet(results_dir)

        print(f"\nshare workers: {args.workers} Spark tasks on local[2], group {group}\n")
        print(result.table())
        rows = done.select("id", "delivery_count").collect()  # 3,000 small rows: counted here, one Spark job
        accepted_ids = {r.id for r in rows}
        by_count = collections.Counter(r.delivery_count for r in rows)
        missing = sorted(all_ids - accepted_ids)
        # nothing is left in the group: what was not accepted was archived by the broker
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit",
                           "log_level": 3})
        c.subscribe([topic])
        left = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not left:
            left = [m for m in c.poll(0.5) if m.error() is None]
        c.close()
        print("\noutcome                                   items")
        print(f"accepted on the first delivery          {by_count.get(1, 0):>7,}")
        print(f"accepted after a retry (delivery >= 2)  {sum(v for k, v in by_count.items() if k >= 2):>7,}")
        print(f"archived after 3 deliveries (poison)    {len(missing):>7,}   ids {missing}")
        print(f"still waiting in the group              {len(left):>7,}")
        print(f"results                                 {len(rows):>7,}   rows in {results_dir}")
        print(f"\nthroughput: Spark writer {n / write_s:,.0f} items/s (the session's first Python tasks); "
              f"share workers {result.totals['accepted'] / result.seconds:,.0f} items/s accepted "
              f"({result.seconds:.1f} s wall, 4 s idle stop included)")
        done.orderBy("id").show(5)
    finally:
        del admin  # closed before the broker stops, or its threads log the lost connection
        spark.stop()
        if broker is not None:
            broker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
