"""Real Java applications from Maven Central against sharebroker: Kafka Streams 4.4 (and Kafka Connect 4.4).

The jars come from ``tests/kafka_ref/apps/pom.xml`` (resolved once with Maven, the classpath cached outside the
work tree by ``tests/kafka_ref/launcher.py``); the programs in ``java/`` are compiled once with ``javac`` into
the same cache. Every JVM runs in its own session with a bounded heap, dies with the test process and is stopped
(SIGTERM, then SIGKILL) at the end of its test. Skipped only when ``java`` or ``mvn`` is missing.

- Kafka Streams word count (``java/WordCount.java``): RocksDB store, ``exactly_once_v2``,
  ``group.protocol=classic`` and ``group.protocol=streams`` (KIP-1071 streams group); two instances (two JVMs, own state dirs); one is killed with SIGKILL mid-stream
  and restarted; the committed output holds each word's counts 1..N exactly once, and the interactive query
  (HTTP, on the instance hosting the word) answers N.
- Kafka Connect: two distributed workers (``ConnectDistributed``) run a line-file source and sink
  (``java/LineFileSource.java``, ``java/LineFileSink.java``; connect-file 4.4.0 is not on the Maven mirror) set up
  through the REST API; the worker running the source is killed with SIGKILL once everything so far is committed;
  the other takes over and the sink file holds every line exactly once, on sharebroker and on the reference Kafka.
"""
from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.kafka_ref import launcher
from tests.missing_inputs import PREFIX as MISSING_INPUT
from tests.support import unique, until

JAVA_DIR = Path(__file__).resolve().parent / "java"
HEAP = "-Xmx320m"

pytestmark = pytest.mark.skipif(bool(launcher.missing_tools()),  # a missing input: a failure under CI
                                reason=f"{MISSING_INPUT}Kafka Streams / Connect need "
                                       f"{' and '.join(launcher.missing_tools())} on PATH")


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
        (directory / "log4j2.properties").write_text(launcher.LOG4J2.format(log=directory / "app.log"))

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


# KIP-1071 streams groups: the session timeout and heartbeat interval are the broker's (group configs), not the
# client's; short ones so the killed instance's threads leave the group (and their tasks move) within the test
STREAMS_GROUPS = {"group.streams.min.session.timeout.ms": 6000, "group.streams.session.timeout.ms": 6000,
                  "group.streams.min.heartbeat.interval.ms": 500, "group.streams.heartbeat.interval.ms": 500}


@pytest.mark.parametrize("protocol", ["classic", "streams"])
def test_kafka_streams_word_count_exactly_once_across_a_kill(broker_factory, java_apps, tmp_path, protocol):
    broker = broker_factory(STREAMS_GROUPS if protocol == "streams" else None)
    bs = broker.bootstrap
    app_id, source, sink = unique("wordcount"), unique("lines"), unique("counts")
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(source, 4, 1), NewTopic(sink, 4, 1)]).values():
        f.result(15)

    ports = [launcher.free_port(), launcher.free_port()]
    a, b = (java_apps("WordCount", [bs, app_id, source, sink, str(tmp_path / f"state-{i}"), str(port), protocol],
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
    if protocol == "streams":
        _streams_groups_tool(bs, app_id, source)


def _streams_groups_tool(bootstrap: str, app_id: str, source: str) -> None:
    """``kafka-streams-groups.sh`` (StreamsGroupCommand of kafka-tools 4.4.0) on the running application: ListGroups
    with the streams type, StreamsGroupDescribe, OffsetFetch on the streams group."""
    cp = launcher.classpath()  # the reference launcher's jars: kafka-tools 4.4.0

    def tool(*args: str) -> list[list[str]]:
        r = subprocess.run(["java", "-Xmx256m", "-cp", cp, "org.apache.kafka.tools.streams.StreamsGroupCommand",
                            "--bootstrap-server", bootstrap, *args], capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, f"{args} exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        return [line.split() for line in r.stdout.splitlines() if line.strip()]

    assert tool("--list") == [[app_id]]  # ListGroups with types [streams]: only the application's group
    assert tool("--list", "--state") == [["GROUP", "STATE"], [app_id, "Stable"]]
    state = tool("--describe", "--group", app_id, "--state")
    assert state[0][:2] == ["GROUP", "COORDINATOR"] and state[1][0] == app_id
    assert state[1][-3:] == ["sticky", "Stable", "2"]  # assignor, state, #members (one stream thread each)
    members = tool("--describe", "--group", app_id, "--members")
    assert members[0] == ["GROUP", "MEMBER", "PROCESS", "CLIENT-ID", "ASSIGNMENTS"] and len(members) == 3
    # the word count's two subtopologies, four tasks each (the source and the repartition topic have 4
    # partitions): every active task on one of the two members
    active = []
    for row in members[1:]:
        text = " ".join(row[4:])
        assert text.startswith("ACTIVE:"), text
        for sid, parts in re.findall(r"(\d+):\[([\d,]*)\]", text.split("STANDBY:")[0]):
            active += [(sid, int(p)) for p in parts.split(",") if p]
    assert sorted(active) == [(sid, p) for sid in ("0", "1") for p in range(4)]
    offsets = tool("--describe", "--group", app_id, "--offsets")
    rows = {(r[1], int(r[2])): r for r in offsets[1:]}
    assert {(source, p) for p in range(4)} <= set(rows)
    assert all(rows[(source, p)][-1] == "0" for p in range(4))  # OFFSET-LAG: everything consumed


# ------------------------------------------------------------------------------------------- Kafka Connect

def _worker_properties(bootstrap: str, group: str, port: int) -> str:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "config.storage.topic": f"{group}-configs",
        "offset.storage.topic": f"{group}-offsets",
        "status.storage.topic": f"{group}-status",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": "2",
        "status.storage.partitions": "2",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "listeners": f"http://127.0.0.1:{port}",
        "rest.advertised.host.name": "127.0.0.1",
        "offset.flush.interval.ms": "500",
        # a departed worker's connectors and tasks move to the others after this delay (default 5 min)
        "scheduled.rebalance.max.delay.ms": "2000",
        "session.timeout.ms": "6000",
        "heartbeat.interval.ms": "1000",
    }
    return "".join(f"{k}={v}\n" for k, v in conf.items())


def _rest(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


def _statuses(port: int, names: list[str]) -> dict[str, dict] | None:
    """Each connector's status (state and worker of the connector and of each task), or None."""
    out = {}
    for name in names:
        code, status = _rest(port, "GET", f"/connectors/{name}/status")
        if code != 200:
            return None
        out[name] = status
    return out


def _all_running(statuses: dict | None, tasks: dict[str, int]) -> bool:
    return bool(statuses) and all(
        s["connector"]["state"] == "RUNNING" and len(s["tasks"]) == tasks[name]
        and all(t["state"] == "RUNNING" for t in s["tasks"]) for name, s in statuses.items())


def _workers_of(statuses: dict) -> set[str]:
    return {s["connector"]["worker_id"] for s in statuses.values()} | {
        t["worker_id"] for s in statuses.values() for t in s["tasks"]}


def _sink_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


@pytest.mark.parametrize("side", ["sharebroker", "kafka"])
def test_kafka_connect_distributed_workers_copy_a_file_across_a_worker_kill(side, request, broker_factory,
                                                                            java_apps, tmp_path):
    """Two distributed Connect workers share a file source (1 task) and a file sink (2 tasks); the worker
    running the source is killed (SIGKILL) once everything so far is copied and committed; the other one takes
    its connectors and tasks over and copies the rest: every line in the sink file exactly once. The same
    story runs against the reference Kafka 4.4 (``kafka_ref``), with the same outcome."""
    bs = broker_factory().bootstrap if side == "sharebroker" else request.getfixturevalue("kafka_ref").bootstrap
    group, topic = unique("connect"), unique("lines")
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        f.result(15)
    ports = [launcher.free_port(), launcher.free_port()]
    workers = []
    for i, port in enumerate(ports):
        (tmp_path / f"worker-{i}.properties").write_text(_worker_properties(bs, group, port))
        workers.append(java_apps("org.apache.kafka.connect.cli.ConnectDistributed",
                                 [str(tmp_path / f"worker-{i}.properties")], f"connect-{i}").start())
    until(lambda: all(_rest(p, "GET", "/connectors")[0] == 200 for p in ports), 90,
          "both Connect workers' REST APIs\n" + workers[0].tail(), interval=0.2)

    # the workers created their internal topics compacted (Connect refuses to run on others)
    internal = [ConfigResource("topic", f"{group}-{kind}") for kind in ("configs", "offsets", "status")]

    def policies() -> list[str] | None:
        try:  # Kafka's broker may not know a topic the controller just created yet: UNKNOWN_TOPIC_OR_PART
            return [f.result(15)["cleanup.policy"].value for f in admin.describe_configs(internal).values()]
        except KafkaException as e:
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            return None
    assert until(policies, 30, "the Connect workers' internal topics described", interval=0.2) == ["compact"] * 3

    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    lines = [f"line {i:04d}" for i in range(400)]
    source_file.write_text("".join(f"{line}\n" for line in lines[:200]))
    tasks = {"src": 1, "sink": 2}
    assert _rest(ports[0], "PUT", "/connectors/src/config",
                 {"connector.class": "LineFileSource", "tasks.max": "1", "file": str(source_file),
                  "topic": topic})[0] in (200, 201)
    assert _rest(ports[1], "PUT", "/connectors/sink/config",
                 {"connector.class": "LineFileSink", "tasks.max": "2", "file": str(sink_file),
                  "topics": topic})[0] in (200, 201)
    statuses = until(lambda: (s := _statuses(ports[0], list(tasks))) and _all_running(s, tasks) and s, 60,
                     "both connectors and their tasks RUNNING\n" + workers[0].tail(), interval=0.2)
    # the connectors and tasks are spread over both workers
    until(lambda: len(_workers_of(_statuses(ports[0], list(tasks)) or {})) == 2, 30,
          f"work on both workers: {statuses}", interval=0.2)
    until(lambda: sorted(_sink_lines(sink_file)) == lines[:200], 60, "the first 200 lines in the sink file",
          interval=0.2)

    # everything copied so far committed: the sink group's offsets at the end of the topic
    def committed() -> int:
        from confluent_kafka import ConsumerGroupTopicPartitions
        got = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("connect-sink")])["connect-sink"].result(10)
        return sum(max(tp.offset, 0) for tp in got.topic_partitions)
    until(lambda: committed() == 200, 30, "the sink's committed offsets", interval=0.2)

    # and the source's position stored (offset.flush.interval.ms): a source killed before that is re-read from the
    # last stored position by the survivor, at least once, as Connect promises (seen on Kafka 4.4 under load)
    def source_line() -> int:
        code, body = _rest(ports[0], "GET", "/connectors/src/offsets")  # KIP-875
        if code != 200 or not isinstance(body, dict):
            return -1
        return max((o["offset"].get("line", -1) for o in body.get("offsets", []) if o.get("offset")), default=-1)
    until(lambda: source_line() == 200, 30, "the source's stored position at line 200", interval=0.2)

    statuses = _statuses(ports[0], list(tasks))
    victim = next(i for i, p in enumerate(ports) if statuses["src"]["tasks"][0]["worker_id"].endswith(f":{p}"))
    survivor = ports[1 - victim]
    workers[victim].kill()
    with source_file.open("a") as f:
        f.write("".join(f"{line}\n" for line in lines[200:]))
    until(lambda: _all_running(s := _statuses(survivor, list(tasks)), tasks)
          and _workers_of(s) == {f"127.0.0.1:{survivor}"}, 60,
          "the survivor running every connector and task\n" + workers[1 - victim].tail(), interval=0.2)
    until(lambda: len(_sink_lines(sink_file)) >= len(lines) and sorted(set(_sink_lines(sink_file))) == lines, 60,
          "all 400 lines in the sink file", interval=0.2)
    # exactly once: no line repeated
    assert sorted(_sink_lines(sink_file)) == lines
