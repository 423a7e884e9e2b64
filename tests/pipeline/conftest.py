"""Fixtures for the Spark pipeline tests: ONE SparkSession (local[2], 4 task attempts) and ONE broker
for the whole session, real clients over 127.0.0.1. Under xdist every test here is in the
``xdist_group`` "spark", so they all run in one worker with one session.

- ``spark``: the session-scoped SparkSession with ``pipeline``'s data sources registered (a
  SparkSession costs ~10-20 s to start on 2 cores, so every test shares it).
- ``broker``: a session-scoped ``BrokerProcess`` (record locks may be as short as 1 s). The suite's
  one traceback check (``tests/conftest.py``, autouse) checks what it logged after each test and
  module; what it logs while stopping at the end of the session is checked here, with the same
  ``BrokerProcess.new_tracebacks()``.
- ``kafka``: helpers to create topics, configure share groups, produce records and see what a group
  still hands out.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.missing_inputs import require_modules

require_modules("pyspark", "pyarrow")  # the test extra installs them

from confluent_kafka import Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,  # noqa: E402
                                   NewTopic)

from broker.testing import BrokerProcess  # noqa: E402
from tests.support import unique  # noqa: E402

BROKER_CONFIG = {
    "group.share.min.record.lock.duration.ms": "1000",
    # groups of these tests use short heartbeats and sessions: assignments follow members joining
    # and leaving within a second, and a SIGKILLed member is dropped after its 3 s session
    "group.share.min.session.timeout.ms": "2000",
    "group.share.min.heartbeat.interval.ms": "200",
}
FAST_GROUP = {"share_heartbeat_interval_ms": 300, "share_session_timeout_ms": 3000}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    """Every test here runs in the same xdist worker: they share the one SparkSession."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable  # Python workers with this interpreter's packages
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    root = str(Path(__file__).resolve().parents[2])  # workers import pipeline from this checkout
    os.environ["PYTHONPATH"] = os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                         if p and p != root])
    from pyspark.sql import SparkSession

    import pipeline

    s = (SparkSession.builder.master("local[2,4]")  # 2 task slots; a task may fail 3 times
         .appName("sharebroker-pipeline-tests")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.driver.memory", "2g")
         .config("spark.sql.streaming.stopTimeout", "30s")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    pipeline.register(s)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("pipeline-broker"), config=BROKER_CONFIG)
    b.start()
    yield b
    b.stop()
    problems = b.new_tracebacks()
    assert not problems, "the broker logged a Python traceback while stopping:\n" + "\n----\n".join(problems)


class Kafka:
    """Small admin/produce helpers bound to the session broker."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def topic(self, partitions: int, prefix: str = "t") -> str:
        name = unique(prefix)
        self.admin.create_topics([NewTopic(name, partitions)])[name].result(15)
        return name

    def group(self, **configs) -> str:
        """A new share group reading from the earliest offset, with ``configs`` (underscored names)."""
        group = unique("g")
        configs = {**FAST_GROUP, **configs}
        entries = {"share.auto.offset.reset": "earliest", **{k.replace("_", "."): str(v) for k, v in configs.items()}}
        res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries.items()])
        self.admin.incremental_alter_configs([res])[res].result(15)
        return group

    def produce(self, topic: str, records, per_flush: int | None = None, **conf) -> None:
        """``records``: iterable of dicts with value and optional key, partition, headers, timestamp."""
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                      "linger.ms": 0 if per_flush else 5, **conf})
        for i, r in enumerate(records):
            while True:
                try:
                    p.produce(topic, **r)
                    break
                except BufferError:
                    p.poll(0.1)
            if per_flush and (i + 1) % per_flush == 0:
                assert p.flush(30) == 0
        assert p.flush(60) == 0

    def leftovers(self, group: str, topic: str, wait: float = 3.0) -> list:
        """Records the group still hands out within ``wait`` seconds (released, not acknowledged);
        they are released again when this consumer closes."""
        c = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + wait
        try:
            while time.monotonic() < deadline:
                msgs = [m for m in c.poll(0.5) if m.error() is None]
                got += msgs
                if msgs:
                    break
        finally:
            c.close()
        return got


@pytest.fixture(scope="session")
def kafka(broker):
    k = Kafka(broker.bootstrap)
    yield k
    del k.admin  # closed before the broker stops (the last test still refers to the helper until its end)
