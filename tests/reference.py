"""The ``kafka_ref`` session fixture: a running reference Apache Kafka 4.4.0 (``tests/kafka_ref/``).

One combined broker+controller serves the whole test run, whatever the number of pytest-xdist
workers: the first worker that needs it starts it (Maven resolves the jars on the very first run),
records it in a state file under ``$TMPDIR/sharebroker-kafka-ref/<xdist testrun uid>/``, and the others
find it there (a file lock orders them). Each worker registers as a user; at the end of its session
the one that started it waits until the other users have left, then stops it. The JVM is also sent
SIGTERM by the kernel when that worker dies (PR_SET_PDEATHSIG), so a killed run leaves no Kafka.
One JVM rather than one per worker: ~0.3 GiB RSS and ~5 s of start-up on 2 cores, paid once.

Tests share it: they use their own topic and group names (``tests.support.unique``). Tests that need it are
skipped only when ``java`` or ``mvn`` is missing (or ``SHAREBROKER_NO_KAFKA_REF=1`` is set, for
machines without Maven Central); a Maven or start-up failure is an error.
"""
from __future__ import annotations

import fcntl
import itertools
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.kafka_ref.launcher import STATE, KafkaRef, missing_tools, pid_alive
from tests.missing_inputs import missing_input

NO_KAFKA_ENV = "SHAREBROKER_NO_KAFKA_REF"
_starts = itertools.count()


class SharedKafkaRef:
    """A reference Kafka shared by the processes of one test run (see the module's doc)."""

    def __init__(self, run_key: str):
        self.root = Path(tempfile.gettempdir()) / "sharebroker-kafka-ref" / run_key
        self.users_file = self.root / "users.json"
        self.me = os.getpid()
        self.ref: KafkaRef | None = None
        self.owner = False

    @contextmanager
    def _locked(self):
        while True:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(self.root / "lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:  # the last user removes the directory: lock again if it went while this one waited
                    current = os.stat(self.root / "lock").st_ino == os.fstat(lock.fileno()).st_ino
                except FileNotFoundError:
                    current = False
                if current:
                    yield
                    return

    def _read(self) -> dict:
        try:
            return json.loads(self.users_file.read_text())
        except (OSError, ValueError):
            return {}

    def _write(self, users: dict) -> None:
        tmp = self.users_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(users))
        os.replace(tmp, self.users_file)

    def acquire(self) -> KafkaRef:
        with self._locked():
            users = self._read()
            if users and pid_alive(users["owner"]):
                ref = KafkaRef.from_state(Path(users["state"]))
                if all(n.alive() for n in ref.nodes):
                    users["users"] = [*users["users"], self.me]
                    self._write(users)
                    self.ref = ref
                    return ref
            directory = self.root / f"kafka-{self.me}-{next(_starts)}"
            directory.mkdir(parents=True)
            ref = KafkaRef(directory).start()
            ref.save_state(directory / STATE)
            self._write({"owner": self.me, "state": str(directory / STATE), "users": [self.me]})
            self.ref, self.owner = ref, True
            return ref

    def release(self, timeout: float = 1200.0) -> None:
        with self._locked():
            users = self._read()
            users["users"] = [u for u in users.get("users", []) if u != self.me]
            self._write(users)
        if not self.owner:
            return
        # the run's other workers may still be using it: wait until they have left (or died)
        deadline = time.monotonic() + timeout
        while True:
            with self._locked():
                users = self._read()
                if not [u for u in users.get("users", []) if pid_alive(u)] or time.monotonic() > deadline:
                    self.ref.stop()
                    shutil.rmtree(self.root, ignore_errors=True)  # a later acquire starts a new one
                    return
            time.sleep(0.5)


def skip_without_kafka() -> None:
    """Skip, with the reason, where the reference Kafka (or Kafka's tools) cannot run: turned off, or
    ``java`` / ``mvn`` missing."""
    if os.environ.get(NO_KAFKA_ENV) == "1":
        pytest.skip(f"the reference Kafka 4.4 is turned off ({NO_KAFKA_ENV}=1)")
    missing = missing_tools()
    if missing:
        missing_input(f"the reference Kafka 4.4 needs {' and '.join(missing)} on PATH (resolved with Maven)")


def kafka_cluster(running_env: str, settings: dict[str, str] | None = None, heap: str = "-Xmx384m",
                  scram_listener: bool = False):
    """A generator for a module-scoped fixture: a 3-node Kafka 4.4 KRaft cluster started for the module
    and stopped at its end, or (``running_env`` set to ``host:port,...``) a running one, an object with
    only ``.bootstrap`` (``scram_bootstrap`` None). Skips as ``skip_without_kafka``."""
    skip_without_kafka()
    if os.environ.get(running_env):  # an already running cluster (to iterate on a module's tests)
        yield type("Running", (), {"bootstrap": os.environ[running_env], "scram_bootstrap": None})()
        return
    ref = KafkaRef(nodes=3, heap=heap, settings=settings, scram_listener=scram_listener).start()
    try:
        yield ref
    finally:
        ref.stop()


@pytest.fixture(scope="session")
def kafka_ref():
    """A running reference Apache Kafka 4.4.0 (``tests.kafka_ref.KafkaRef``; ``.bootstrap``)."""
    skip_without_kafka()
    shared = SharedKafkaRef(os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}")
    ref = shared.acquire()
    try:
        yield ref
    finally:
        shared.release()
