"""MirrorMaker 2 for the tests: the dedicated driver ``org.apache.kafka.connect.mirror.MirrorMaker``
(``connect-mirror-maker.sh``) replicating cluster ``src`` to one or more target clusters.

``tests/kafka_ref/mm2-pom.xml`` names connect-mirror with its Connect runtime and Java clients (4.3.1:
Maven Central serves no connect-mirror 4.4.0); Maven resolves them as for the reference Kafka
(``launcher.classpath``), cached in ``~/.cache/sharebroker/kafka-4.4.0/mm2-classpath.txt``.
``MirrorMaker(src, {alias: bootstrap}, topics, groups, dir)`` writes ``mm2.properties`` (``src``
replicated to each target alias; replication factor 1 for every internal topic on both sides;
checkpoints, group offset syncs, refreshes and offset flushes every second) and runs it with
``-Xmx512m``; ``stop()`` sends SIGTERM, then SIGKILL. The JVM also gets SIGTERM when the process
that started it dies.
"""
from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.kafka_ref.launcher import (HEAP, JVM_OPTS, LOG4J2, KafkaNode, _die_with_parent, _signal, _wait_dead, classpath,
                                      tail_files)

MM2_POM = Path(__file__).resolve().parent / "mm2-pom.xml"


def mm2_classpath() -> str:
    return classpath(pom=MM2_POM, name="mm2-classpath.txt")


def mm2_properties(src: str, targets: dict[str, str], topics: str, groups: str,
                   extra: dict[str, str] | None = None) -> dict[str, str]:
    """MM2's settings: cluster ``src`` (at ``src``) replicated to each of ``targets`` (alias -> bootstrap)."""
    one = "1"
    conf = {"clusters": ", ".join(["src", *targets]), "src.bootstrap.servers": src}
    for alias, bootstrap in targets.items():
        conf |= {f"{alias}.bootstrap.servers": bootstrap, f"src->{alias}.enabled": "true",
                 f"src->{alias}.topics": topics, f"src->{alias}.groups": groups}
    conf |= {
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "1",
        "emit.checkpoints.interval.seconds": "1",
        # only the src->target herders (heartbeats would add a herder for every other pair)
        "emit.heartbeats.enabled": "false",
        # Connect finds MM2's connectors through their ServiceLoader manifests, without a class scan
        "plugin.discovery": "service_load",
        "refresh.topics.interval.seconds": "1",
        "refresh.groups.interval.seconds": "1",
        "offset-syncs.topic.location": "source",
        # the worker's offset flush also sends the offset syncs MirrorSourceTask held back (OffsetSyncWriter's
        # delayed and throttled ones): every second, not every minute, so translations catch up quickly
        "offset.flush.interval.ms": "1000",
        "replication.factor": one,
        "checkpoints.topic.replication.factor": one,
        "heartbeats.topic.replication.factor": one,
        "offset-syncs.topic.replication.factor": one,
        "offset.storage.replication.factor": one,
        "status.storage.replication.factor": one,
        "config.storage.replication.factor": one,
        "tasks.max": "1",
    }
    conf.update(extra or {})
    return conf


class MirrorMaker:
    def __init__(self, src: str, targets: dict[str, str], topics: str, groups: str, directory: Path,
                 extra: dict[str, str] | None = None):
        self.directory = Path(directory)
        self.conf = mm2_properties(src, targets, topics, groups, extra)
        self.proc: subprocess.Popen | None = None

    @property
    def log_file(self) -> Path:
        return self.directory / "mm2.log"

    def start(self) -> "MirrorMaker":
        cp = mm2_classpath()
        self.directory.mkdir(parents=True, exist_ok=True)
        props = self.directory / "mm2.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.conf.items()))
        (self.directory / "log4j2.properties").write_text(LOG4J2.format(log=self.log_file))
        cmd = ["java", HEAP, *JVM_OPTS, f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
               "-cp", cp, "org.apache.kafka.connect.mirror.MirrorMaker", str(props)]
        with open(self.directory / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=_die_with_parent)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        if not self.alive():
            return
        node = KafkaNode(0, self.directory, proc=self.proc, pid=self.proc.pid)
        _signal(self.proc.pid, signal.SIGTERM)
        if not _wait_dead(node, timeout):
            _signal(self.proc.pid, signal.SIGKILL)
            _wait_dead(node, 10.0)

    def tail(self, lines: int = 60) -> str:
        return tail_files((self.directory / "stdout.log", self.log_file), lines)

    def __enter__(self) -> "MirrorMaker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
