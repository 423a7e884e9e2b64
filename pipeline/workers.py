"""Spark tasks as an elastic pool of share-group workers.

    result = run_share_workers(spark, {"bootstrap.servers": bs, "group.id": "jobs"}, ["work"],
                               handler, workers=8, retryable=(TimeoutError,), poison=(ValueError,),
                               output_schema="status string, millis double")
    result.outputs.show()          # one row per accepted record: its coordinates + the handler's output
    result.tasks                   # one dict per task: counts, stop reason, attempt, pid, seconds

Each of the ``workers`` Spark tasks runs a real ``confluent_kafka.ShareConsumer`` in explicit
acknowledgement mode and calls ``handler(record)`` for every record it gets:

- the handler returns: the record is ACCEPTed and its output kept;
- it raises one of ``retryable``: RELEASE, the broker delivers the record again (to any worker)
  with a higher delivery count, until the group's ``share.delivery.count.limit`` archives it;
- it raises one of ``poison``: REJECT, the record is archived at once;
- it raises anything else: the task fails (Spark retries it); the failing record is RELEASEd, the
  rest of that poll is left unacknowledged and returns to the group when the consumer closes.

Outputs are written, per poll, to a Parquet file under ``output_path`` *before* that poll's records
are acknowledged, so an accepted record always has its output on disk; a worker that dies between
the two leaves an output whose record is delivered again (at-least-once: outputs may hold a record
twice, with increasing ``delivery_count``). ``result.outputs`` reads them back.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

META_FIELDS = "topic string, partition int, offset long, delivery_count int, task int, attempt int"
N_META = META_FIELDS.count(",") + 1  # the leading columns of every output row
# a bound on a task's wait for its first assignment, which always comes unless no subscribed topic exists
JOIN_TIMEOUT = 60.0


class ShareRecord:
    """What the handler gets: one record, and how often it has been delivered."""

    __slots__ = ("topic", "partition", "offset", "key", "value", "headers", "timestamp", "delivery_count")

    def __init__(self, m):
        self.topic = m.topic()
        self.partition = m.partition()
        self.offset = m.offset()
        self.key = m.key()
        self.value = m.value()
        self.headers = m.headers()
        self.timestamp = m.timestamp()[1]
        self.delivery_count = m.delivery_count()

    def __repr__(self) -> str:
        return (f"ShareRecord({self.topic}-{self.partition}@{self.offset}, key={self.key!r}, "
                f"delivery_count={self.delivery_count})")


@dataclass
class ShareWorkResult:
    outputs: Any  # DataFrame: META_FIELDS + the handler's output
    tasks: list[dict]  # per task (its successful attempt)
    output_path: str
    seconds: float
    totals: dict = field(default_factory=dict)

    def tasks_df(self, spark):
        return spark.createDataFrame(self.tasks)

    def table(self) -> str:
        """The per-task outcome as a text table."""
        cols = ["task", "attempt", "polled", "accepted", "released", "rejected", "ack_errors", "files",
                "seconds", "stop"]
        rows = [[str(t[c]) if not isinstance(t[c], float) else f"{t[c]:.1f}" for c in cols] for t in self.tasks]
        tot = self.totals
        rows.append(["all", "", str(tot["polled"]), str(tot["accepted"]), str(tot["released"]),
                     str(tot["rejected"]), str(tot["ack_errors"]), str(tot["files"]), f"{self.seconds:.1f}", ""])
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
        line = lambda r: "  ".join(v.rjust(w) for v, w in zip(r, widths))  # noqa: E731
        return "\n".join([line(cols), line(["-" * w for w in widths])] + [line(r) for r in rows])


def output_struct(output_schema):
    """(full StructType of the outputs, whether the handler's output is a struct)."""
    from pyspark.sql.types import StructType, _parse_datatype_string

    meta = _parse_datatype_string(META_FIELDS)
    if output_schema is None:
        output_schema = "string"
    if isinstance(output_schema, str):
        try:
            out = _parse_datatype_string(output_schema)
        except Exception:
            out = _parse_datatype_string(f"result {output_schema}")
    else:
        out = output_schema
    fields = list(meta.fields)
    if isinstance(out, StructType):
        clash = {f.name for f in out.fields} & {f.name for f in meta.fields}
        if clash:
            raise ValueError(f"output_schema fields {sorted(clash)} clash with the record columns")
        return StructType(fields + list(out.fields)), True
    from pyspark.sql.types import StructField

    return StructType(fields + [StructField("result", out)]), False


def run_share_workers(spark, conf: dict, topics: Sequence[str] | str, handler: Callable[[ShareRecord], Any], *,
                      workers: int = 2, retryable: Iterable[type] = (), poison: Iterable[type] = (),
                      output_schema=None, output_path: str | None = None, idle_timeout: float = 5.0,
                      max_records_per_task: int | None = None, timeout: float | None = None,
                      poll_timeout: float = 0.5, together: bool = False) -> ShareWorkResult:
    """Run ``workers`` Spark tasks, each a share-group member calling ``handler`` on its records.

    ``conf`` is the ShareConsumer configuration (``bootstrap.servers``, ``group.id``, ...; the
    acknowledgement mode is set to explicit). A task stops when it got no record for
    ``idle_timeout`` seconds since the group assigned it partitions (joining takes longer on a busy
    broker, and a member without an assignment cannot get records), after ``max_records_per_task``
    handled records (the rest of that poll goes back to the group), or at ``timeout`` seconds after
    the start of the run. With fewer task slots than ``workers`` Spark runs the tasks in waves.

    ``together=True`` runs the tasks as one Spark barrier stage: Spark starts them all at once (there
    must be a task slot for each) and none polls before every one has subscribed, so they share the
    work from the first record; otherwise a task that Spark starts late (a Python worker starting on
    a busy machine) may find the work done by the others. Spark restarts every task of a barrier
    stage when one fails.
    """
    topics = [topics] if isinstance(topics, str) else list(topics)
    schema, struct_out = output_struct(output_schema)
    if output_path is None:
        output_path = tempfile.mkdtemp(prefix="share-workers-")
    os.makedirs(output_path, exist_ok=True)
    deadline = time.time() + timeout if timeout else None
    job = _TaskSpec(conf=dict(conf), topics=topics, handler=handler, retryable=tuple(retryable),
                    poison=tuple(poison), schema=schema, struct_out=struct_out, output_path=output_path,
                    idle_timeout=idle_timeout, max_records=max_records_per_task, deadline=deadline,
                    poll_timeout=poll_timeout, run_id=uuid.uuid4().hex[:8], together=together)
    started = time.monotonic()
    sc = spark.sparkContext
    sc.setJobDescription(f"share workers: {workers} tasks on {','.join(topics)} (group {conf.get('group.id')})")
    try:
        rdd = sc.parallelize(range(workers), workers)
        tasks = (rdd.barrier() if together else rdd).mapPartitionsWithIndex(job.run).collect()
    finally:
        sc.setJobDescription(None)
    seconds = time.monotonic() - started
    tasks.sort(key=lambda t: t["task"])
    totals = {k: sum(t[k] for t in tasks) for k in ("polled", "accepted", "released", "rejected",
                                                     "ack_errors", "files")}
    totals["records_per_second"] = totals["accepted"] / seconds if seconds else 0.0
    outputs = spark.read.schema(schema).parquet(output_path)
    return ShareWorkResult(outputs=outputs, tasks=tasks, output_path=output_path, seconds=seconds, totals=totals)


class _AssignmentWatch:
    """Whether the share group has assigned the consumer partitions yet, from librdkafka's statistics
    (``cgrp.assignment_size``; served by ``poll``, so it is seen on the poll after it happened). A
    ``stats_cb`` of the caller's configuration still gets every report."""

    INTERVAL_MS = 500

    def __init__(self, conf: dict):
        self.yet = False
        self._user_cb = conf.get("stats_cb")
        self.conf = {**conf, "stats_cb": self._on_stats}
        if not int(self.conf.get("statistics.interval.ms") or 0):
            self.conf["statistics.interval.ms"] = self.INTERVAL_MS

    def _on_stats(self, report: str) -> None:
        if not self.yet:
            self.yet = json.loads(report).get("cgrp", {}).get("assignment_size", 0) > 0
        if self._user_cb is not None:
            self._user_cb(report)


@dataclass
class _TaskSpec:
    conf: dict
    topics: list
    handler: Callable
    retryable: tuple
    poison: tuple
    schema: Any
    struct_out: bool
    output_path: str
    idle_timeout: float
    max_records: int | None
    deadline: float | None
    poll_timeout: float
    run_id: str
    together: bool

    # ------------------------------------------------------------------ in the Spark task
    def run(self, index: int, _items) -> Iterable[dict]:
        from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
        from pyspark import BarrierTaskContext, TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        stats = {"task": index, "attempt": attempt, "pid": os.getpid(), "polled": 0, "accepted": 0,
                 "released": 0, "rejected": 0, "ack_errors": 0, "files": 0, "poll_errors": 0,
                 "max_delivery_count": 0, "seconds": 0.0, "stop": ""}
        started = time.monotonic()
        accept, release, reject = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT

        def on_commit(offsets, exc):
            if exc is not None:
                stats["ack_errors"] += sum(len(v) for v in offsets.values()) if offsets else 1

        conf = {**self.conf, "share.acknowledgement.mode": "explicit"}
        if self.max_records is not None:  # acquire no more than the task may handle (librdkafka's default: 500)
            conf.setdefault("max.poll.records", max(1, min(500, self.max_records)))
        assigned = _AssignmentWatch(conf)
        consumer = ShareConsumer(assigned.conf)
        consumer.set_acknowledgement_commit_callback(on_commit)
        consumer.subscribe(self.topics)
        if self.together:
            BarrierTaskContext.get().barrier()  # every task has subscribed: they join the group together
        handler, retryable, poison = self.handler, self.retryable, self.poison
        seq = 0
        last_record = time.monotonic()
        failure: BaseException | None = None

        def handled_enough() -> bool:  # max_records_per_task records handled
            return self.max_records is not None and \
                stats["accepted"] + stats["released"] + stats["rejected"] >= self.max_records

        try:
            while True:
                if self.deadline is not None and time.time() >= self.deadline:
                    stats["stop"] = "deadline"
                    break
                if handled_enough():
                    stats["stop"] = "max_records"
                    break
                msgs = consumer.poll(self.poll_timeout)
                if not msgs:
                    if not assigned.yet and time.monotonic() - started < JOIN_TIMEOUT:
                        last_record = time.monotonic()  # idle counts from the assignment on
                    elif time.monotonic() - last_record >= self.idle_timeout:
                        stats["stop"] = "idle"
                        break
                    continue
                last_record = time.monotonic()
                acks: list = []
                rows: list = []
                try:
                    for m in msgs:
                        if m.error() is not None:
                            stats["poll_errors"] += 1
                            continue
                        if handled_enough():
                            break  # the rest of this poll goes back to the group at close
                        stats["polled"] += 1
                        rec = ShareRecord(m)
                        if rec.delivery_count > stats["max_delivery_count"]:
                            stats["max_delivery_count"] = rec.delivery_count
                        try:
                            out = handler(rec)
                        except poison:
                            acks.append((m, reject))
                            stats["rejected"] += 1
                            continue
                        except retryable:
                            acks.append((m, release))
                            stats["released"] += 1
                            continue
                        except BaseException:
                            acks.append((m, release))
                            stats["released"] += 1
                            raise
                        rows.append((rec.topic, rec.partition, rec.offset, rec.delivery_count, index, attempt, out))
                        acks.append((m, accept))
                        stats["accepted"] += 1
                except BaseException as e:  # escaping the handler: keep what was done, then fail
                    failure = e
                # outputs first, then the acknowledgements (sent with the next poll / commit)
                if rows:
                    self._write(rows, index, attempt, seq)
                    seq += 1
                    stats["files"] += 1
                for m, kind in acks:
                    consumer.acknowledge(m, kind)
                if failure is not None:
                    raise failure
        finally:
            try:
                for tp, err in (consumer.commit_sync(30) or {}).items():
                    if err is not None:
                        stats["ack_errors"] += 1
            except KafkaException:
                stats["ack_errors"] += 1
            finally:
                consumer.close()
        stats["seconds"] = time.monotonic() - started
        yield stats

    def _write(self, rows: list, index: int, attempt: int, seq: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from pipeline._common import arrow_schema

        schema = arrow_schema(self.schema)
        cols = list(zip(*rows))
        arrays = [pa.array(cols[i], schema.field(i).type) for i in range(N_META)]
        outs = cols[N_META]
        if self.struct_out:
            names = schema.names[N_META:]
            per_field: list[list] = [[] for _ in names]
            for o in outs:
                if o is None:
                    for f in per_field:
                        f.append(None)
                elif isinstance(o, dict):
                    for f, n in zip(per_field, names):
                        f.append(o.get(n))
                elif isinstance(o, (tuple, list)):
                    for f, v in zip(per_field, o):
                        f.append(v)
                elif len(names) == 1:
                    per_field[0].append(o)
                else:
                    raise TypeError(f"handler output {o!r} does not match the output schema {names}")
            arrays += [pa.array(f, schema.field(N_META + i).type) for i, f in enumerate(per_field)]
        else:
            t = schema.field(N_META).type
            if pa.types.is_string(t):
                outs = [None if o is None else str(o) for o in outs]
            arrays.append(pa.array(outs, t))
        name = f"part-{self.run_id}-{index:05d}-{attempt}-{seq:06d}.parquet"
        tmp = os.path.join(self.output_path, f".{name}.tmp")
        pq.write_table(pa.Table.from_arrays(arrays, schema=schema), tmp)
        os.replace(tmp, os.path.join(self.output_path, name))  # readers see whole files only
