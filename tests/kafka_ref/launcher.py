"""The reference Apache Kafka 4.4.0 the tests and benchmarks compare sharebroker with.

    python -m tests.kafka_ref classpath           # resolve the jars with Maven (once; cached)
    python -m tests.kafka_ref start [--dir D]     # one combined broker+controller; prints its bootstrap
    python -m tests.kafka_ref cluster [--dir D]   # three combined KRaft nodes on loopback
    python -m tests.kafka_ref stop --dir D        # stop what `start` / `cluster` left running in D

Nothing is fetched by hand: ``tests/kafka_ref/pom.xml`` names Kafka's broker (``kafka_2.13``, with
``kafka.Kafka`` and ``kafka.tools.StorageTool``), ``kafka-tools``, ``kafka-clients`` and the log4j2
binding Kafka's release puts beside them; ``mvn dependency:build-classpath`` resolves them into
``~/.m2`` and the classpath is kept in ``~/.cache/sharebroker/kafka-4.4.0/classpath.txt``
(``SHAREBROKER_KAFKA_CACHE`` moves it), outside the work tree, rebuilt when the pom changes.
``tests/kafka_ref/apps/pom.xml`` (Kafka Streams and Kafka Connect 4.4.0, for the integration tests) is
resolved the same way into ``apps-classpath.txt`` (``classpath(pom=APPS_POM, name=...)``), and
``compiled(sources, cp, prefix)`` compiles a test's Java programs with ``javac`` into the same cache.

A node is formatted with ``StorageTool format`` (the single node ``--standalone``, a dynamic quorum as
Kafka 4's quick start does; the cluster a static quorum, ``controller.quorum.voters``) and
started as ``java ... kafka.Kafka server.properties`` on 127.0.0.1 with free ports; it is ready when it
answers Metadata over its socket with every node of the cluster. The single node's internal topics
(``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``) have one partition and
replication factor 1, ``group.initial.rebalance.delay.ms=0``, ``group.share.min.record.lock.duration.ms=1000``
(short acquisition locks in tests); the heap is bounded (``-Xmx512m``).
Kafka 4.4 enables share groups by default (``share.version`` 2 at the latest metadata version).

Stdlib only (plus this repository's codec and ``tests.wire`` for the readiness probe).
"""
from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

KAFKA_VERSION = "4.4.0"
POM = Path(__file__).resolve().parent / "pom.xml"
APPS_POM = Path(__file__).resolve().parent / "apps" / "pom.xml"  # Kafka Streams, Kafka Connect (integration tests)
SCHEMAS_POM = Path(__file__).resolve().parent / "schemas-pom.xml"  # the jars holding Kafka's message schemas
CACHE_ENV = "SHAREBROKER_KAFKA_CACHE"
HEAP = "-Xmx512m"
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS, and no JMX
JVM_OPTS = ["-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true"]

# The single node: everything Kafka would replicate lives on one replica, and the internal topics
# have one partition each (Kafka's defaults of 50 only slow the first coordinator look-up down).
SINGLE_NODE = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    # lets a test's share group use acquisition locks down to 1 s (the group config
    # share.record.lock.duration.ms is bounded by it; Kafka's default minimum is 15 s)
    "group.share.min.record.lock.duration.ms": "1000",
}
CLUSTER = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "share.coordinator.state.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
"""


class KafkaRefError(RuntimeError):
    pass


def missing_tools() -> list[str]:
    """What is missing to run the reference Kafka (``java``, ``mvn``): empty when nothing is."""
    return [tool for tool in ("java", "mvn") if shutil.which(tool) is None]


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "sharebroker" / f"kafka-{KAFKA_VERSION}")


def _valid_classpath(path: Path, pom: Path = POM) -> str | None:
    try:
        if path.stat().st_mtime < pom.stat().st_mtime:
            return None
        cp = path.read_text().strip()
    except OSError:
        return None
    jars = cp.split(os.pathsep) if cp else []
    if not jars or not all(os.path.exists(j) for j in jars):
        return None
    return cp


def classpath(timeout: float = 1800.0, pom: Path = POM, name: str = "classpath.txt") -> str:
    """The reference Kafka's classpath, resolved with Maven the first time (under a lock, so parallel
    test workers download once), then read from the cache. ``pom`` and ``name`` resolve another pom
    (``APPS_POM``: Kafka Streams and Kafka Connect) into another cached file."""
    out = cache_dir() / name
    cp = _valid_classpath(out, pom)
    if cp:
        return cp
    if missing_tools():
        raise KafkaRefError(f"the reference Kafka needs {' and '.join(missing_tools())} on PATH")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / "classpath.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cp = _valid_classpath(out, pom)  # another process resolved it while this one waited
        if cp:
            return cp
        tmp = out.with_suffix(".tmp")
        cmd = ["mvn", "-B", "-q", "-f", str(pom), "dependency:build-classpath", f"-Dmdep.outputFile={tmp}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0 or not tmp.exists():
            raise KafkaRefError(f"Maven could not resolve {pom}:\n" + (done.stdout + done.stderr)[-3000:])
        os.replace(tmp, out)
    cp = _valid_classpath(out, pom)
    if not cp:
        raise KafkaRefError(f"Maven wrote no usable classpath to {out}")
    return cp


def compiled(sources: list[Path], cp: str, prefix: str) -> str:
    """The directory of ``sources`` compiled with ``javac`` against ``cp``: once per version of the
    sources, into the cache (``PREFIX-DIGEST``), outside the work tree; parallel workers race harmlessly."""
    import hashlib

    digest = hashlib.sha256(b"".join(src.read_bytes() for src in sources) + cp.encode()).hexdigest()[:16]
    out = cache_dir() / f"{prefix}-{digest}"
    if not (out / ".compiled").exists():
        if missing_tools():
            raise KafkaRefError(f"compiling {prefix} needs {' and '.join(missing_tools())} on PATH")
        tmp = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=f"{prefix}-tmp-"))
        done = subprocess.run(["javac", "-d", str(tmp), "-cp", cp, *map(str, sources)], capture_output=True,
                              text=True, timeout=300)
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise KafkaRefError(f"javac failed for {prefix}:\n{done.stdout}{done.stderr}")
        (tmp / ".compiled").touch()
        try:
            os.replace(tmp, out)
        except OSError:  # another worker compiled it first
            shutil.rmtree(tmp, ignore_errors=True)
    return str(out)


def free_port() -> int:
    """A port for a Kafka listener, below the ephemeral range as ours (a node restarts on it)."""
    from broker.testing import listen_port

    return listen_port()


def new_cluster_id() -> str:
    """A random Kafka Uuid in its base64 form (not one starting with '-', as Uuid.randomUuid)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


# --- readiness probe: Metadata v12 (no topics) over the socket, with our own codec -----------------

def metadata_brokers(bootstrap: str, timeout: float = 2.0) -> int:
    """How many brokers ``bootstrap`` lists in its Metadata answer (raises when it does not answer)."""
    from protocol.messages.metadata import MetadataRequest
    from tests.wire import WireClient

    with WireClient(bootstrap, client_id="kafka-ref-probe", timeout=timeout) as w:
        return len(w.request(MetadataRequest(topics=[], allow_auto_topic_creation=False), 12).brokers)


# --- nodes -------------------------------------------------------------------------------------------

@dataclass
class KafkaNode:
    node_id: int
    directory: Path
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    pid: int | None = None  # the JVM's pid (also for a node started by another process)
    scram_port: int | None = None  # a SASL_PLAINTEXT listener with SCRAM-SHA-256/512 (clients only)
    jvm_options: tuple[str, ...] = ()  # e.g. -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=...

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.directory / "server.log"

    def properties(self, voters: str | None, settings: dict[str, str]) -> str:
        quorum = ({"controller.quorum.voters": voters} if voters else
                  {"controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}"})
        conf = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            **quorum,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            **settings,
        }
        if self.scram_port:  # brokers and controllers keep talking PLAINTEXT among themselves
            conf["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.scram_port}"
            conf["advertised.listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.scram_port}"
            conf["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            conf["sasl.enabled.mechanisms"] = "SCRAM-SHA-256,SCRAM-SHA-512"
            for mech in ("scram-sha-256", "scram-sha-512"):
                conf[f"listener.name.sasl_plaintext.{mech}.sasl.jaas.config"] = \
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return "".join(f"{k}={v}\n" for k, v in conf.items())

    def java(self, cp: str, main: str, *args: str, heap: str = HEAP) -> list[str]:
        return ["java", heap, *JVM_OPTS, *self.jvm_options, f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.directory}", "-cp", cp, main, *args]

    def format(self, cp: str, cluster_id: str, voters: str | None, settings: dict[str, str]) -> None:
        """``kafka-storage format``: with ``voters`` a static quorum, without it a standalone dynamic one
        (``--standalone``, kraft.version 1, as Kafka 4's quick start formats a single node)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "server.properties").write_text(self.properties(voters, settings))
        (self.directory / "log4j2.properties").write_text(LOG4J2.format(log=self.log_file))
        args = ["format", "-t", cluster_id, "-c", str(self.directory / "server.properties")]
        done = subprocess.run(self.java(cp, "kafka.tools.StorageTool", *args, *([] if voters else ["--standalone"]),
                                        heap="-Xmx256m"),
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise KafkaRefError(f"kafka-storage format failed for node {self.node_id}:\n{done.stdout}{done.stderr}")

    def start(self, cp: str, heap: str = HEAP, die_with_parent: bool = True) -> None:
        out = open(self.directory / "stdout.log", "ab")
        self.proc = subprocess.Popen(self.java(cp, "kafka.Kafka", str(self.directory / "server.properties"), heap=heap),
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=_die_with_parent if die_with_parent else None)
        out.close()
        self.pid = self.proc.pid

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and pid_alive(self.pid)

    def stop(self, timeout: float = 30.0) -> None:
        if self.pid is None or not self.alive():
            return
        _signal(self.pid, signal.SIGTERM)
        if not _wait_dead(self, timeout):
            _signal(self.pid, signal.SIGKILL)
            _wait_dead(self, 10.0)

    def rss_kib(self) -> int | None:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None

    def tail(self, lines: int = 40) -> str:
        return tail_files((self.directory / "stdout.log", self.log_file), lines)


def tail_files(files, lines: int) -> str:
    """The last ``lines`` lines of each of ``files`` that exists, each under its name."""
    parts = []
    for f in files:
        try:
            parts.append(f"--- {f}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-lines:]))
        except OSError:
            pass
    return "\n".join(parts)


def _die_with_parent() -> None:
    """The JVM is sent SIGTERM when the process that started it dies (PR_SET_PDEATHSIG), so a killed
    test run leaves no Kafka behind."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
    except Exception:  # not Linux: the explicit stop() still applies
        pass


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is dead
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_dead(node: KafkaNode, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node.proc is not None:
            try:
                node.proc.wait(timeout=0.1)
                return True
            except subprocess.TimeoutExpired:
                continue
        if not pid_alive(node.pid):
            return True
        time.sleep(0.1)
    return False


class KafkaRef:
    """One combined broker+controller (``nodes=1``) or a KRaft cluster of combined nodes on loopback.

    ``start()`` formats and starts them and waits until each answers Metadata with every node;
    ``stop()`` stops them (SIGTERM, then SIGKILL after 30 s). ``directory`` defaults to a new
    temporary one, removed by ``stop()`` when this object made it. ``scram_listener``: each node also
    listens SASL_PLAINTEXT with SCRAM (``scram_bootstrap``; users by AlterUserScramCredentials).
    ``jvm_options``: added to each node's JVM (system properties)."""

    def __init__(self, directory: str | Path | None = None, nodes: int = 1, settings: dict[str, str] | None = None,
                 heap: str = HEAP, start_timeout: float = 180.0, scram_listener: bool = False,
                 jvm_options: tuple[str, ...] = ()):
        self._own_dir = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="kafka-ref-"))
        base = SINGLE_NODE if nodes == 1 else CLUSTER
        self.settings = {**base, **(settings or {})}
        self.heap = heap
        self.start_timeout = start_timeout
        self.nodes = [KafkaNode(i, self.directory / f"node-{i}", scram_port=free_port() if scram_listener else None,
                                jvm_options=tuple(jvm_options)) for i in range(1, nodes + 1)]
        self.cluster_id = new_cluster_id()
        self.startup_seconds: float | None = None  # from the first JVM to every node answering

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def scram_bootstrap(self) -> str | None:
        return ",".join(f"127.0.0.1:{n.scram_port}" for n in self.nodes) if self.nodes[0].scram_port else None

    @property
    def voters(self) -> str | None:
        """The static quorum of a cluster; a single node is a standalone dynamic quorum (None)."""
        if len(self.nodes) == 1:
            return None
        return ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)

    def start(self, die_with_parent: bool = True) -> "KafkaRef":
        cp = classpath()
        t0 = time.monotonic()
        for node in self.nodes:
            node.format(cp, self.cluster_id, self.voters, self.settings)
        t1 = time.monotonic()
        try:
            for node in self.nodes:
                node.start(cp, self.heap, die_with_parent)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        t2 = time.monotonic()
        self.format_seconds, self.startup_seconds = t1 - t0, t2 - t1
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        pending = list(self.nodes)
        while pending:
            node = pending[0]
            if not node.alive():
                raise KafkaRefError(f"reference Kafka node {node.node_id} exited:\n{node.tail()}")
            try:
                if metadata_brokers(node.bootstrap) == len(self.nodes):
                    pending.pop(0)
                    continue
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise KafkaRefError(f"reference Kafka node {node.node_id} did not answer in "
                                    f"{self.start_timeout:.0f} s:\n"
                                    f"{node.tail()}")
            time.sleep(0.2)

    def rss_kib(self) -> list[int | None]:
        return [n.rss_kib() for n in self.nodes]

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive():
                _signal(node.pid, signal.SIGTERM)
        for node in self.nodes:
            node.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def save_state(self, path: Path) -> None:
        path.write_text(json.dumps({"bootstrap": self.bootstrap, "cluster_id": self.cluster_id,
                                    "nodes": [{"node_id": n.node_id, "pid": n.pid, "port": n.port,
                                               "controller_port": n.controller_port, "directory": str(n.directory)}
                                              for n in self.nodes]}))

    @classmethod
    def from_state(cls, path: Path) -> "KafkaRef":
        state = json.loads(path.read_text())
        ref = cls(directory=path.parent, nodes=len(state["nodes"]))
        ref._own_dir = False
        ref.cluster_id = state["cluster_id"]
        ref.nodes = [KafkaNode(n["node_id"], Path(n["directory"]), n["port"], n["controller_port"], pid=n["pid"])
                     for n in state["nodes"]]
        return ref

    def __enter__(self) -> "KafkaRef":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- CLI -------------------------------------------------------------------------------------------

STATE = "kafka-ref.json"


def _cli_start(args, nodes: int) -> int:
    directory = Path(args.dir or tempfile.mkdtemp(prefix="kafka-ref-"))
    if (directory / STATE).exists():
        print(f"{directory / STATE} exists: stop that one first (python -m tests.kafka_ref stop --dir {directory})",
              file=sys.stderr)
        return 1
    settings = dict(s.split("=", 1) for s in args.set)
    ref = KafkaRef(directory, nodes=nodes, settings=settings, heap=args.heap)
    ref._own_dir = False
    ref.start(die_with_parent=False)
    ref.save_state(directory / STATE)
    rss = ", ".join(f"{r / 1024:.0f} MiB" if r else "?" for r in ref.rss_kib())
    print(f"bootstrap {ref.bootstrap}")
    print(f"directory {directory}  (format {ref.format_seconds:.1f} s, start {ref.startup_seconds:.1f} s, RSS {rss})")
    print(f"stop with: python -m tests.kafka_ref stop --dir {directory}")
    return 0


def _cli_stop(args) -> int:
    path = Path(args.dir) / STATE
    if not path.exists():
        print(f"nothing started in {args.dir} ({path} is missing)", file=sys.stderr)
        return 1
    KafkaRef.from_state(path).stop()
    path.unlink()
    print(f"stopped the reference Kafka in {args.dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kafka_ref", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("classpath", help="resolve Kafka's jars with Maven and print the cached classpath file")
    for name, what in (("start", "one combined broker+controller"), ("cluster", "three combined KRaft nodes")):
        p = sub.add_parser(name, help=f"format and start {what} on 127.0.0.1 (runs until `stop`)")
        p.add_argument("--dir", help="directory for the data, logs and state (default: a new temporary one)")
        p.add_argument("--heap", default=HEAP, help=f"JVM heap option (default {HEAP})")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a broker setting")
    p = sub.add_parser("stop", help="stop what start / cluster started in --dir")
    p.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "classpath":
            classpath()
            print(cache_dir() / "classpath.txt")
            return 0
        if args.cmd == "stop":
            return _cli_stop(args)
        return _cli_start(args, 1 if args.cmd == "start" else 3)
    except KafkaRefError as e:
        print(e, file=sys.stderr)
        return 1
