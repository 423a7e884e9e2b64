"""pipeline/README.md's examples run as written: every Python block, in order, in one namespace (as in
one Python session), against the session broker with the topics and groups the README assumes; only
the broker's address and the ``/tmp/jobs`` directory are replaced. Then their effects are checked."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import NewTopic

from tests.support import set_group_configs, until

README = Path(__file__).resolve().parents[2] / "pipeline" / "README.md"
BLOCKS = ["session", "topics", "workers", "stream"]


def blocks() -> dict[str, str]:
    """name -> code of each marked Python block; every Python block must be marked."""
    text = README.read_text()
    marked = dict(re.findall(r"<!-- readme-example: (\S+) -->\n```python\n(.*?)```", text, re.S))
    assert len(marked) == text.count("```python"), "a Python block of pipeline/README.md is not marked"
    return marked


def read_all(bootstrap: str, topic: str, partitions: int) -> list[tuple]:
    """(key, value, headers) of every record of ``topic``, read with a plain consumer."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "readme-check", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    out, eof = [], set()
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        until(lambda: _drain(c, out, eof) >= partitions, 60, f"the end of {topic}")
    finally:
        c.close()
    return out


def _drain(c, out: list, eof: set) -> int:
    for m in c.consume(500, 0.5):
        if m.error() is None:
            out.append((m.key(), m.value(), m.headers()))
        elif m.error().code() == KafkaError._PARTITION_EOF:
            eof.add(m.partition())
    return len(eof)


def test_every_python_block_runs_as_written(spark, broker, kafka, tmp_path):
    code = blocks()
    assert list(code) == BLOCKS
    bs = broker.bootstrap
    new = {"t1": 2, "t2": 1, "out": 2, "work": 2}
    for name, f in kafka.admin.create_topics([NewTopic(t, n) for t, n in new.items()]).items():
        f.result(15)
    t1 = [{"key": b"a%d" % i, "value": b"one-%d" % i, "partition": i % 2, "headers": [("h", b"%d" % i)]}
          for i in range(300)]
    t2 = [{"key": b"b%d" % i, "value": b"two-%d" % i} for i in range(200)]
    n_work = 400
    work = [{"key": b"%d" % i, "value": b"item-%d" % i, "partition": i % 2} for i in range(n_work)]
    for topic, records in (("t1", t1), ("t2", t2), ("work", work)):
        kafka.produce(topic, records)
    for group in ("renderers", "jobs"):
        set_group_configs(bs, group, share_auto_offset_reset="earliest")

    ns = {"__name__": "__main__"}  # as a script: handlers travel to the Python workers by value
    for name in BLOCKS:
        src = code[name].replace("127.0.0.1:9092", bs).replace('"/tmp/jobs/', f'"{tmp_path}/jobs/')
        exec(compile(src, f"{README}:{name}", "exec"), ns)
        if name == "session":
            assert ns["spark"] is spark  # the suite's session, with the data sources registered again

        elif name == "topics":
            expected = sorted((r["key"], r["value"], r.get("headers")) for r in t1 + t2)
            assert sorted(read_all(bs, "out", 2), key=repr) == sorted(expected, key=repr)

        elif name == "workers":
            res = ns["res"]
            rows = res.outputs.collect()
            assert sorted(r.id for r in rows) == list(range(n_work)), "each item accepted exactly once"
            assert all(r.digest == hashlib.sha256(b"item-%d" % r.id).hexdigest()[:8] for r in rows)
            assert sum(t["accepted"] for t in res.tasks) == n_work and len(res.tasks) == 2

        elif name == "stream":
            q, out = ns["q"], ns["out"]
            try:
                # a batch's progress is reported once its sink output is committed
                until(lambda: q.exception() is not None
                      or sum(p["numInputRows"] for p in q.recentProgress) >= n_work, 120,
                      "the streaming query to write every work item", interval=0.2)
                assert q.exception() is None
            finally:
                q.stop()
            values = [bytes(r.value) for r in spark.read.parquet(out).select("value").collect()]
            assert set(values) == {r["value"] for r in work}  # at-least-once: every item, maybe twice

