"""run_share_workers: Spark tasks as share-group workers (explicit acks, real ShareConsumers)."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

from confluent_kafka.admin import NewTopic
from pyspark import cloudpickle

from pipeline.workers import run_share_workers
from tests.support import describe_share_group, unique, until

# handlers and exception classes of this module travel to the Python workers by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Transient(Exception):
    """Retryable: RELEASE, delivered again."""


class Poison(Exception):
    """Not retryable: REJECT, archived at once."""


def rows_by_record(df) -> dict[int, list]:
    out: dict[int, list] = {}
    for r in df.collect():
        out.setdefault(int(r.result), []).append(r)
    return out


def test_eight_tasks_on_two_partitions_each_record_accepted_once(spark, broker, kafka):
    topic = kafka.topic(2, "work")
    group = kafka.group()
    n = 2000
    kafka.produce(topic, ({"value": b"%d" % i, "partition": i % 2} for i in range(n)), per_flush=20)

    def handler(rec):
        return rec.value.decode()

    res = run_share_workers(spark, {"bootstrap.servers": broker.bootstrap, "group.id": group}, [topic], handler,
                            workers=8, max_records_per_task=n // 8, idle_timeout=5)
    # 8 members of one share group on 2 partitions: every task got (and handled) records
    assert [t["task"] for t in res.tasks] == list(range(8))
    assert all(t["accepted"] > 0 for t in res.tasks), res.table()
    assert res.totals["accepted"] == n and res.totals["released"] == 0 and res.totals["rejected"] == 0
    assert res.totals["ack_errors"] == 0
    by_record = rows_by_record(res.outputs)
    assert sorted(by_record) == list(range(n))
    assert all(len(v) == 1 for v in by_record.values()), "a record was handled twice"
    # A task that reaches its record cap closes with records acquired but not handled: they return to
    # the group and keep their delivery count (Kafka 4.3+, KAFKA-19972), so another task sees them at 2.
    assert all(v[0].delivery_count <= 2 for v in by_record.values())
    assert {(v[0].partition, v[0].offset) for v in by_record.values()} == {(p, o) for p in (0, 1)
                                                                            for o in range(n // 2)}
    assert kafka.leftovers(group, topic) == []


def test_killed_worker_and_handler_failures_lose_nothing(spark, broker, kafka, tmp_path):
    """Task 1's first attempt is killed (SIGKILL of its Python worker) while it holds a record it has
    acquired and not acknowledged; handlers fail transiently (RELEASE) or for good (REJECT). No order of
    events is left to timing: task 0 waits for the kill before handling more than its first 20
    records, so task 1 gets records whenever it starts; the kill comes on a record at its first
    delivery, so no attempt handled it before; locks last longer than the test, so a record comes back
    only by a RELEASE or when its consumer closes or dies, never because a slow machine let a lock
    expire."""
    topic = kafka.topic(2, "work")
    limit = 3
    group = kafka.group(share_delivery_count_limit=limit, share_record_lock_duration_ms=60_000)
    n = 600
    kafka.produce(topic, ({"value": b"%d" % i, "partition": i % 2} for i in range(n)), per_flush=10)
    log = str(tmp_path / "calls.log")
    killed_on = str(tmp_path / "killed")  # written by task 1's first attempt just before it dies
    handled = [0]  # per task attempt (the handler is unpickled afresh for each task)

    def handler(rec):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task, attempt = ctx.partitionId(), ctx.attemptNumber()
        i = int(rec.value)
        with open(log, "a") as f:
            f.write(f"{i},{rec.delivery_count},{task},{attempt},{os.getpid()}\n")
        handled[0] += 1
        if task == 0 and attempt == 0 and handled[0] == 20:
            deadline = time.monotonic() + 120  # task 1 runs beside it (2 slots): only a broken run waits long
            while not os.path.exists(killed_on) and time.monotonic() < deadline:
                time.sleep(0.02)
        if (task == 1 and attempt == 0 and handled[0] >= 60 and rec.delivery_count == 1
                and i % 50 not in (7, 17) and i % 10 != 3):
            # the Python worker dies mid-poll, nothing of this poll acknowledged, on a good record
            with open(killed_on, "w") as f:
                f.write(str(i))
            os.kill(os.getpid(), signal.SIGKILL)
        if i % 50 == 7:
            raise Transient(f"{i} always fails")  # poison by retries: archived at the delivery limit
        if i % 50 == 17:
            raise Poison(f"{i} is malformed")  # REJECT: archived at once
        if i % 10 == 3 and rec.delivery_count == 1:
            raise Transient(f"{i} fails the first time")
        return str(i)

    # tasks 0 and 1 run first (2 slots) and share the 2 partitions; the killed member keeps its
    # assignment until its 3 s session times out, its records come back at once (disconnect)
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "max.poll.records": 50}
    res = run_share_workers(spark, conf, [topic], handler, workers=3, retryable=(Transient,), poison=(Poison,),
                            idle_timeout=6)

    calls = [tuple(int(x) for x in line.split(",")) for line in open(log)]
    killed = [c for c in calls if c[2] == 1 and c[3] == 0]
    assert os.path.exists(killed_on), f"task 1 was not killed (its first attempt handled {len(killed)} records)"
    victim = int(open(killed_on).read())
    assert killed[-1][:2] == (victim, 1), killed[-1]
    assert any(t["task"] == 1 and t["attempt"] >= 1 for t in res.tasks), "Spark did not retry the killed task"

    poison_retry = {i for i in range(n) if i % 50 == 7}
    poison_reject = {i for i in range(n) if i % 50 == 17}
    good = set(range(n)) - poison_retry - poison_reject
    by_record = rows_by_record(res.outputs)
    assert set(by_record) == good, (f"missing {sorted(good - set(by_record))[:10]}, "
                                   f"extra {sorted(set(by_record) - good)[:10]}\n{res.table()}")

    # records that failed once came back (RELEASE) with a higher delivery count
    for i in good:
        if i % 10 == 3:
            assert max(r.delivery_count for r in by_record[i]) >= 2, (i, by_record[i])

    # the record the kill caught came back (the dead consumer's connection closed) and another attempt did it
    killed_pid = killed[0][4]
    assert [(r.task, r.attempt) for r in by_record[victim] if r.delivery_count < 2] == []
    assert any(c[0] == victim and c[4] != killed_pid for c in calls)
    # so did everything else the killed attempt handled without writing its output
    done_by_killed = {int(r.result) for rows in by_record.values() for r in rows if (r.task, r.attempt) == (1, 0)}
    lost_in_flight = {c[0] for c in killed} - done_by_killed - poison_retry - poison_reject
    assert victim in lost_in_flight
    for i in lost_in_flight:
        assert any((r.task, r.attempt) != (1, 0) for r in by_record[i]), i
        assert any(c[0] == i and c[4] != killed_pid for c in calls), i

    # poison records: handled up to the delivery limit (retryable) or once (REJECT), never accepted, archived
    for i in poison_retry:
        counts = [c[1] for c in calls if c[0] == i]
        assert max(counts) == limit, (i, counts)
    for i in poison_reject:
        assert i not in by_record
    assert kafka.leftovers(group, topic) == [], "records were left neither accepted nor archived"


class LateStart:
    """A handler whose copy in task 1 arrives ``delay`` seconds late: unpickling it (what a Spark task
    does first) waits, as a Python worker starting on a busy machine does. Each call is logged as
    ``task,time``, and so is the moment each task got its copy."""

    def __init__(self, log: str, delay: float):
        self.log, self.delay = log, delay

    def __getstate__(self):
        return {"log": self.log, "delay": self.delay}

    def __setstate__(self, state):
        from pyspark import TaskContext

        self.__dict__.update(state)
        ctx = TaskContext.get()
        if ctx is not None:
            if ctx.partitionId() == 1:
                time.sleep(self.delay)  # the late start itself, not a wait for an outcome
            self._write(f"start,{ctx.partitionId()},{time.time()}")

    def _write(self, line: str) -> None:
        with open(self.log, "a") as f:
            f.write(line + "\n")

    def __call__(self, rec):
        from pyspark import TaskContext

        self._write(f"record,{TaskContext.get().partitionId()},{time.time()}")
        return rec.value.decode()


def test_together_no_task_polls_before_every_task_has_started(spark, broker, kafka, tmp_path):
    """``together=True``: task 1 starts 8 s after task 0 (its handler arrives late), and yet no record
    is handled before task 1 has started, so both can share the one partition; without it task 0 alone
    would have done the work by then (the demo's second task polled nothing on a busy machine)."""
    topic = kafka.topic(1, "together")
    group = kafka.group()
    n = 200
    kafka.produce(topic, ({"value": b"%d" % i} for i in range(n)), per_flush=10)
    log = str(tmp_path / "calls.log")
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "max.poll.records": 10}
    res = run_share_workers(spark, conf, [topic], LateStart(log, 8.0), workers=2, idle_timeout=3, together=True)
    assert res.totals["accepted"] == n, res.table()
    lines = [line.split(",") for line in open(log).read().split()]
    starts = {int(task): float(t) for kind, task, t in lines if kind == "start"}
    first_record = min(float(t) for kind, _, t in lines if kind == "record")
    assert set(starts) == {0, 1}
    assert first_record >= starts[1], f"a record was handled {starts[1] - first_record:.1f} s before task 1 started"


def test_idle_time_counts_from_the_assignment(spark, broker, kafka):
    """A task's idle stop counts from the moment the group assigned it partitions: a worker subscribed to
    a topic that is created only after twice its idle timeout (a group that takes that long to assign,
    as a busy broker may) still handles its records instead of stopping idle with none."""
    topic, group = unique("late"), kafka.group()
    idle = 2.0
    n = 50

    def create_later():
        until(lambda: describe_share_group(broker.bootstrap, group).members, 60, "the worker in the group")
        time.sleep(2 * idle)  # the scenario: no partition to assign for longer than the idle timeout
        kafka.admin.create_topics([NewTopic(topic, 1)])[topic].result(15)
        kafka.produce(topic, ({"value": b"%d" % i} for i in range(n)), per_flush=10)

    creator = threading.Thread(target=create_later, daemon=True)
    creator.start()
    res = run_share_workers(spark, {"bootstrap.servers": broker.bootstrap, "group.id": group}, [topic],
                            lambda rec: rec.value.decode(), workers=1, idle_timeout=idle)
    creator.join(60)
    assert res.totals["accepted"] == n, res.table()
