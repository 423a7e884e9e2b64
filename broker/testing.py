"""Run a real sharebroker for tests: ``BrokerProcess`` and the ``sharebroker`` pytest fixture.

    from broker.testing import BrokerProcess
    with BrokerProcess(data_dir) as b:
        Producer({"bootstrap.servers": b.bootstrap})

The broker runs as a subprocess on 127.0.0.1 with a free port; ``kill9()`` and
``start()`` restart it on the same data directory and port, for crash tests.

Installed as a pytest plugin (entry point ``pytest11``), so any project that
installs sharebroker gets two fixtures:

- ``sharebroker``: a fresh, started ``BrokerProcess`` per test (``.bootstrap`` is the
  ``host:port`` to give clients).  Broker settings come from the
  ``@pytest.mark.sharebroker(settings)`` marker, e.g.
  ``@pytest.mark.sharebroker({"group.share.record.lock.duration.ms": 1000})``.
- ``sharebroker_factory``: ``sharebroker_factory(settings=None)`` starts another broker
  with those settings (each with its own data directory); all are stopped at teardown.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

_IN_USE = "address already in use"
_READY = re.compile(r"accepting connections on (\S+):(\d+)")
_METRICS = re.compile(r"metrics on http://(\S+):(\d+)/metrics")
_LISTENER = re.compile(r"listener (\S+) \((\S+)\) on (\S+):(\d+)")


def tracebacks(lines: list[str]) -> list[str]:
    """The log lines around each Python traceback in ``lines``."""
    return ["\n".join(lines[max(i - 1, 0):i + 15]) for i, line in enumerate(lines) if "Traceback" in line]


def listen_port(host: str = "127.0.0.1") -> int:
    """A free port for a listener that restarts on the same port, chosen below the kernel's
    ephemeral range: a port the kernel handed out (``bind`` to port 0) is taken again by the next
    outgoing connection that draws it, which would keep a broker killed in a test from binding its
    port again.  Random among free ones, so that processes choosing at once rarely choose alike
    (``BrokerProcess.start`` chooses again if one did)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    pick, family = random.SystemRandom(), socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(100):
        port = pick.randrange(10000, max(low, 10001))
        with socket.socket(family) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker's listener
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(family) as s:  # nothing free down there: the kernel's choice
        s.bind((host, 0))
        return s.getsockname()[1]


class BrokerProcess:
    started: list["BrokerProcess"] = []  # every instance whose start() ran (test harnesses check their logs)
    # Settings every BrokerProcess starts with unless its own config says otherwise: a test suite
    # sets them once (e.g. short share-group heartbeats so share consumers start quickly).
    default_config: dict[str, str] = {}

    def __init__(self, data_dir: str | Path | None = None, config: dict[str, str] | None = None,
                 port: int = 0, host: str = "127.0.0.1", start_timeout: float = 30.0, open_files: int | None = None,
                 env: dict[str, str] | None = None):
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="sharebroker-"))
        self.config = {**BrokerProcess.default_config, **(config or {})}
        self.host = host
        self.port = port
        self.start_timeout = start_timeout
        self.open_files = open_files  # the broker's RLIMIT_NOFILE (soft and hard), e.g. to test at a low limit
        self.env = dict(env or {})  # added to this process's environment for the broker's
        self.proc: subprocess.Popen | None = None
        self.log_lines: list[str] = []
        self.checked_lines = 0
        self.metrics_url: str | None = None  # with sharebroker.metrics.listener set  # log lines already checked for tracebacks (new_tracebacks)
        self._ready = threading.Event()
        self._drainers: list[threading.Thread] = []
        # with a ``listeners`` setting (several listeners, SASL / SSL): name -> bound port, from the log
        self.listener_ports: dict[str, int] = {}
        self._chosen: dict[str, int] = {}  # listener name -> the port chosen for its ``:0``

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def address(self, listener: str) -> str:
        """``host:port`` of a named listener (``listeners=SASL_SSL://127.0.0.1:0,...``)."""
        return f"{self.host}:{self.listener_ports[listener.upper()]}"

    def _listeners_setting(self) -> str:
        """``listeners`` with a port chosen for each ``:0`` at the first start (``listen_port``), the
        same ports at a restart."""
        items = []
        for item in self.config["listeners"].split(","):
            name, sep, addr = item.strip().partition("://")
            host, _, port = addr.rpartition(":")
            if sep and port == "0":
                if name.upper() not in self._chosen:
                    self._chosen[name.upper()] = listen_port(host.strip("[]") or "0.0.0.0")
                item = f"{name}://{host}:{self._chosen[name.upper()]}"
            items.append(item.strip())
        return ",".join(items)

    def start(self) -> "BrokerProcess":
        """Start the broker; the first start of one without a port chooses its ports (``listen_port``),
        again should another process take one first, and a restart keeps them."""
        first = self.port == 0 and not self.listener_ports
        for attempt in range(5):
            try:
                return self._start_once()
            except RuntimeError as e:
                if not (first and _IN_USE in str(e)) or attempt == 4:
                    raise
                self.port, self._chosen = 0, {}
        raise AssertionError("unreachable")

    def _start_once(self) -> "BrokerProcess":
        cmd = [sys.executable, "-m", "broker", "--data-dir", str(self.data_dir)]
        if "listeners" not in self.config:
            self.port = self.port or listen_port(self.host)
            cmd += ["--listen", f"{self.host}:{self.port}"]
        for k, v in self.config.items():
            cmd += ["--set", f"{k}={self._listeners_setting() if k == 'listeners' else v}"]
        if not any(b is self for b in BrokerProcess.started):
            BrokerProcess.started.append(self)
        # One event per process: the drain thread of a killed predecessor must not signal this one.
        self._ready = ready = threading.Event()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env}, preexec_fn=self._limits())
        drainer = threading.Thread(target=self._drain, args=(self.proc, ready), daemon=True)
        drainer.start()
        self._drainers.append(drainer)
        ready.wait(self.start_timeout)
        if not getattr(ready, "listening", False) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("sharebroker did not start:\n" + "\n".join(self.log_lines[-30:]))
        return self

    def _limits(self):
        """What the child runs before the broker starts: the open-file limit, if one is given."""
        if self.open_files is None:
            return None
        n = self.open_files

        def limit() -> None:
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
        return limit

    def _drain(self, proc: subprocess.Popen, ready: threading.Event) -> None:
        for line in proc.stderr:
            line = line.rstrip("\n")
            self.log_lines.append(line)
            ml = _LISTENER.search(line)
            if ml:
                self.listener_ports[ml.group(1)] = int(ml.group(4))
            mm = _METRICS.search(line)
            if mm:
                self.metrics_url = f"http://{mm.group(1)}:{mm.group(2)}/metrics"
            m = _READY.search(line)
            if m:
                self.port = int(m.group(2))
                ready.listening = True
                ready.set()
        ready.set()  # the process ended (or closed stderr) without listening

    def kill9(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None
        self._join_drainers()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._join_drainers()
        return proc.returncode

    def _join_drainers(self, timeout: float = 10.0) -> None:
        """Wait until everything an exited process wrote to stderr is in ``log_lines``."""
        for t in self._drainers:
            t.join(timeout)
        self._drainers = [t for t in self._drainers if t.is_alive()]

    def new_tracebacks(self) -> list[str]:
        """Tracebacks logged since the previous call (all of them, once the process has exited)."""
        if self.proc is None or self.proc.poll() is not None:
            self._join_drainers()
        lines = list(self.log_lines)
        new, self.checked_lines = lines[self.checked_lines:], len(lines)
        return tracebacks(new)

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


try:
    import pytest
except ImportError:  # pytest is only needed for the fixtures
    pytest = None

if pytest is not None:
    def pytest_configure(config):
        config.addinivalue_line("markers", "sharebroker(settings): broker settings for the sharebroker fixture")

    @pytest.fixture
    def sharebroker_factory(tmp_path):
        """Start brokers with given settings: ``sharebroker_factory({"num.partitions": 3})``."""
        started: list[BrokerProcess] = []

        def start(settings: dict | None = None) -> BrokerProcess:
            b = BrokerProcess(tmp_path / f"sharebroker-{len(started)}",
                              config={k: str(v) for k, v in (settings or {}).items()})
            started.append(b)
            return b.start()

        yield start
        for b in started:
            b.close()

    @pytest.fixture
    def sharebroker(request, sharebroker_factory):
        """A fresh broker on a free port with its own data directory (settings from the marker)."""
        marker = request.node.get_closest_marker("sharebroker")
        settings = dict(marker.args[0]) if marker is not None and marker.args else {}
        if marker is not None:
            settings.update(marker.kwargs.get("settings", {}))
        yield sharebroker_factory(settings)
