"""Real Java applications from Maven Central against sharebroker: Kafka Streams 4.4 (and Kafka Connect 4.4).

The jars come from ``tests/kafka_ref/apps/pom.xml`` (resolved once with Maven, the classpath cached outside the
work tree by ``tests/kafka_ref/launcher.py``); the programs in ``java/`` are compiled once with ``javac`` into
the same cache. Every JVM runs in its own session with a bounded heap, dies with the test process and is stopped
(SIGTERM, then SIGKILL) at the end of its test. Skipped only when ``java`` or ``mvn`` is missing.

- Kafka Streams word count (``java/WordCount.java``): RocksDB store, ``exactly_once_v2``,
  ``group.protocol=classic``; two instances (two JVMs, own state dirs); one is killed with SIGKILL mid-stream
  and restarted; the committed output holds each word's counts 1..N exactly once, and the interactive query
  (HTTP, on the instance hosting the word) answers N.
"""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_ref import launcher
from tests.support import unique, until

JAVA_DIR = Path(__file__).resolve().parent / "java"
HEAP = "-Xmx320m"

pytestmark = pytest.mark.skipif(bool(launcher.missing_tools()),
                                reason=f"Kafka Streams / Connect need {' and '.join(launcher.missing_tools())} on PATH")

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""


@pytest.fixture(scope="module")
def apps_classpath():
    """(classpath, compiled classes) of Kafka Streams / Connect 4.4 and the programs of ``java/``."""
    cp = launcher.classpath(pom=launcher.APPS_POM, name="apps-classpath.txt")
    return cp, launcher.compiled(sorted(JAVA_DIR.glob("*.java")), cp, "java-apps")


class JavaApp:
    """One JVM (``main`` with ``args``) logging into ``directory``; ``kill()`` is SIGKILL, ``stop()`` SIGTERM."""

    def __init__(self, cp: str, main: str, args: list[str], directory: Path, heap: str = HEAP):
        self.cmd = ["java", heap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
                    f"-Dlog4j2.configurationFile={directory / 'log4j2.properties'}", "-cp", cp, main, *args]
        self.directory = directory
        self.proc: subprocess.Popen | None = None
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "log4j2.properties").write_text(LOG4J2.format(log=directory / "app.log"))

    def start(self) -> "JavaApp":
        with open(self.directory / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=launcher._die_with_parent)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout: float = 30.0) -> None:
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 60) -> str:
        parts = []
        for f in (self.directory / "stdout.log", self.directory / "app.log"):
            try:
                parts.append(f"--- {f}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-lines:]))
            except OSError:
                pass
        return "\n".join(parts)


@pytest.fixture
def java_apps(apps_classpath, tmp_path):
    """``make(main, args, name)`` -> a new (not started) ``JavaApp``; all are stopped at teardown."""
    cp, classes = apps_classpath
    made: list[JavaApp] = []

    def make(main: str, args: list[str], name: str) -> JavaApp:
        made.append(JavaApp(f"{cp}{os.pathsep}{classes}", main, args, tmp_path / name))
        return made[-1]

    yield make
    for app in made:
        app.stop()
    assert not any(app.alive() for app in made)


def _http(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


# ------------------------------------------------------------------------------------------- Kafka Streams

WORDS = [f"w{i:02d}" for i in range(24)]


def _lines(start: int, n: int) -> list[str]:
    """Deterministic lines of three words each."""
    return [" ".join(WORDS[(i * 7 + j * 5) % len(WORDS)] for j in range(3)) for i in range(start, start + n)]


def _produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i, line in enumerate(lines):
        p.produce(topic, key=str(i).encode(), value=line.encode())
    assert p.flush(30) == 0


class CommittedOutput:
    """Reads the output topic from the start with ``read_committed``: every (word, count) seen, in order."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("wc-reader"),
                           "isolation.level": "read_committed", "enable.auto.commit": False})
        self.c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.seen: dict[str, list[int]] = {}

    def poll(self) -> dict[str, list[int]]:
        for m in self.c.consume(2000, 0.2):
            if m.error():
                raise AssertionError(f"output consumer error: {m.error()}")
            self.seen.setdefault(m.key().decode(), []).append(struct.unpack(">q", m.value())[0])
        return self.seen

    def close(self) -> None:
        self.c.close()


def _running(port: int) -> bool:
    return _http(port, "/state") == (200, "RUNNING")


def test_kafka_streams_word_count_exactly_once_across_a_kill(broker_factory, java_apps, tmp_path):
    broker = broker_factory()
    bs = broker.bootstrap
    app_id, source, sink = unique("wordcount"), unique("lines"), unique("counts")
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(source, 4, 1), NewTopic(sink, 4, 1)]).values():
        f.result(15)

    ports = [launcher.free_port(), launcher.free_port()]
    a, b = (java_apps("WordCount", [bs, app_id, source, sink, str(tmp_path / f"state-{i}"), str(port), "classic"],
                      f"streams-{i}") for i, port in enumerate(ports))
    a.start(), b.start()
    until(lambda: _running(ports[0]) and _running(ports[1]), 60, "both Streams instances RUNNING\n" + a.tail())

    lines = _lines(0, 600)
    expected = Counter(w for line in lines for w in line.split())
    out = CommittedOutput(bs, sink, 4)
    try:
        _produce(bs, source, lines[:400])
        # mid-stream: part of the first batch counted and committed, the rest in an open transaction or not
        # yet read, when instance a is killed
        until(lambda: sum(len(v) for v in out.poll().values()) >= 150, 60, "the first committed counts\n" + a.tail(),
              interval=0.001)
        a.kill()
        _produce(bs, source, lines[400:500])
        until(lambda: _running(ports[1]), 60, "the survivor RUNNING after the kill\n" + b.tail())
        a.start()  # the same state dir: the same process id, its RocksDB store restored from the changelog
        _produce(bs, source, lines[500:])

        def complete():  # every word counted up to its total (more: a duplicate, failed below)
            seen = out.poll()
            return all(seen.get(w, [0])[-1] >= n for w, n in expected.items()) and seen
        seen = until(complete, 90, "the final counts on the output topic\n" + a.tail() + b.tail(), interval=0.2)
        # exactly once: each word's committed counts are 1..N, none repeated or skipped
        assert {w: seen[w] for w in expected} == {w: list(range(1, n + 1)) for w, n in expected.items()}
    finally:
        out.close()

    until(lambda: _running(ports[0]) and _running(ports[1]), 60, "both instances RUNNING again")

    def query(word):
        answers = [_http(port, f"/count?word={word}") for port in ports]
        return [int(body) for status, body in answers if status == 200] == [expected[word]]
    for word in WORDS:
        until(lambda: query(word), 30, f"the interactive query for {word}", interval=0.2)
