"""Exactly-once consume-transform-produce (issue 11): 100,000 records in, exactly 100,000 out.

The application (``txn_eos_app.py``, a separate process using confluent-kafka's
transactional producer with ``send_offsets_to_transaction``) is interrupted once in
the middle: by a kill -9 of the broker (restarted on the same data directory and
port), or by a kill -9 of the application itself (a new instance with the same
transactional id fences the old one and continues).  The output read with
read_committed must hold every transformed record exactly once.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support import create_topic, unique, until

TOTAL = 100_000
PARTITIONS = 2
APP = os.path.join(os.path.dirname(__file__), "txn_eos_app.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class App:
    """One application instance; ``committed`` is the last count it printed."""

    def __init__(self, bootstrap: str, src: str, dst: str, group: str, tid: str):
        self.proc = subprocess.Popen([sys.executable, APP, bootstrap, src, dst, group, tid, str(PARTITIONS),
                                      str(TOTAL)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
        self.committed = 0
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.startswith("committed "):
                self.committed = int(line.split()[1])

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)


def fill_input(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                  "batch.num.messages": 5000})
    for i in range(TOTAL):
        p.produce(topic, b"%06d" % i, key=b"%d" % i, partition=i % PARTITIONS)
        if i % 20000 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def read_output(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("check"), "isolation.level": "read_committed",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[bytes] = []
    try:
        def read():
            out.extend(m.value() for m in c.consume(10000, 0.2) if m.error() is None)
            return len(out) >= TOTAL
        until(read, 60, "the committed output")
        out.extend(m.value() for m in c.consume(10000, 0.5) if m.error() is None)  # nothing more
    finally:
        c.close()
    return out


def check_exactly_once(out: list[bytes]) -> None:
    assert len(out) == TOTAL, f"{len(out)} records in the output"
    assert set(out) == {b"out-%06d" % i for i in range(TOTAL)}


def run_until_done(apps: list[App], timeout: float = 90) -> None:
    code = apps[-1].wait(timeout)
    assert code == 0, apps[-1].lines[-5:]


@pytest.fixture
def pipeline(sharebroker_factory):
    broker = sharebroker_factory()
    src = create_topic(broker.bootstrap, partitions=PARTITIONS, prefix="in")
    dst = create_topic(broker.bootstrap, partitions=PARTITIONS, prefix="out")
    fill_input(broker.bootstrap, src)
    return broker, src, dst, unique("eos"), unique("eos-tx")


def test_exactly_once_across_broker_kill9(pipeline):
    broker, src, dst, group, tid = pipeline
    app = App(broker.bootstrap, src, dst, group, tid)
    try:
        until(lambda: app.committed >= TOTAL // 3, 60, "a third of the input processed")
        broker.kill9()
        broker.start()
        run_until_done([app])
    finally:
        if app.proc.poll() is None:
            app.kill9()
    check_exactly_once(read_output(broker.bootstrap, dst))


def test_exactly_once_across_application_kill9(pipeline):
    broker, src, dst, group, tid = pipeline
    first = App(broker.bootstrap, src, dst, group, tid)
    second = None
    try:
        until(lambda: first.committed >= TOTAL // 3, 60, "a third of the input processed")
        first.kill9()  # most likely inside a transaction: its records and offsets must be aborted
        second = App(broker.bootstrap, src, dst, group, tid)
        run_until_done([first, second])
    finally:
        for a in (first, second):
            if a is not None and a.proc.poll() is None:
                a.kill9()
    assert second.committed < TOTAL  # it continued from the committed offsets
    check_exactly_once(read_output(broker.bootstrap, dst))
