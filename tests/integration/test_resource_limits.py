"""Resource limits over real sockets: idle connections, connections per IP, request memory.

Kafka's settings: ``connections.max.idle.ms`` closes connections without traffic,
``max.connections.per.ip`` (and ``.overrides``) refuses connections beyond the count
from one address, ``queued.max.request.bytes`` bounds the bytes of requests read but
not yet handled (reading stops when it is used up).
"""
from __future__ import annotations

import fcntl
import socket
import struct
import termios
import time

from confluent_kafka import Producer

from tests.support import unique, until


def api_versions_frame(correlation_id: int) -> bytes:
    """ApiVersions v0: request header v1 (key 18, version 0, correlation id, client id "t"), empty body."""
    body = struct.pack(">hhih", 18, 0, correlation_id, 1) + b"t"
    return struct.pack(">i", len(body)) + body


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except (BlockingIOError, socket.timeout):
        return False
    except ConnectionResetError:
        return True


def _open(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    return s


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _unsent(sock: socket.socket) -> int:
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]


def test_idle_connections_are_closed_busy_ones_kept(broker_factory):
    b = broker_factory({"connections.max.idle.ms": 1000})
    idle = _open(b.port)
    busy = _open(b.port)
    busy.setblocking(True)
    busy.settimeout(5)
    start = time.monotonic()
    closed_at = None
    # The busy connection sends a request every 200 ms (the client's pace, not a wait for the
    # broker) for 2.5 s, past the idle time: it stays served while the silent one is closed.
    while time.monotonic() - start < 2.5 or closed_at is None:
        busy.sendall(api_versions_frame(correlation_id=7))
        head = busy.recv(4, socket.MSG_WAITALL)
        assert len(head) == 4, "the busy connection was closed"
        body = busy.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
        assert struct.unpack(">i", body[:4])[0] == 7
        if closed_at is None and _closed_by_peer(idle):
            closed_at = time.monotonic() - start
        assert time.monotonic() - start < 15, "the idle connection was not closed"
        time.sleep(0.2)
    assert closed_at >= 1.0, closed_at  # not before the idle time
    busy.close()
    idle.close()


def test_connections_per_ip_and_overrides(broker_factory):
    b = broker_factory({"max.connections.per.ip": 3, "max.connections.per.ip.overrides": "127.0.0.2:1"})
    mine = [_open(b.port) for _ in range(3)]
    extra = _open(b.port)
    until(lambda: _closed_by_peer(extra), 10, "the 4th connection from 127.0.0.1 to be refused")
    for s in mine:
        assert not _closed_by_peer(s)
    other = _open(b.port, source="127.0.0.2")
    other2 = _open(b.port, source="127.0.0.2")
    until(lambda: _closed_by_peer(other2), 10, "the 2nd connection from 127.0.0.2 to be refused")
    assert not _closed_by_peer(other)
    # A slot freed is a slot usable again.
    mine.pop().close()
    again = until(lambda: _try_open_kept(b.port), 10, "a connection after one was closed")
    for s in mine + [other, again]:
        s.close()
    assert any("max.connections.per.ip" in line for line in b.log_lines)


def _try_open_kept(port: int):
    s = _open(port)
    s.setblocking(True)
    s.settimeout(5)
    s.sendall(api_versions_frame(correlation_id=1))
    try:
        if len(s.recv(4, socket.MSG_WAITALL)) == 4:
            s.setblocking(False)
            return s
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    return None


def test_request_memory_bounds_what_announced_large_frames_cost(broker_factory):
    bound = 16 * 1024 * 1024
    # Connections paused for memory see no traffic: the idle timeout closes them, which is how
    # memory held by clients that stopped sending comes back (as in Kafka).
    b = broker_factory({"queued.max.request.bytes": bound, "socket.request.max.bytes": 200 * 1024 * 1024,
                        "connections.max.idle.ms": 3000})
    pid = b.proc.pid
    before = _rss_kib(pid)
    socks = [_open(b.port) for _ in range(30)]
    chunk = b"\0" * 65536
    for s in socks:  # each announces a 100 MB request and then sends what the kernel takes
        s.send(struct.pack(">i", 100 * 1024 * 1024) + b"\0" * 8)
    sent = 0
    for _ in range(64):
        for s in socks:
            try:
                sent += s.send(chunk)
            except BlockingIOError:
                pass

    def settled():
        first = sum(_unsent(s) for s in socks)
        time.sleep(0.2)
        return first == sum(_unsent(s) for s in socks) and first > 0

    until(settled, 20, "the broker to stop reading (memory used up)")
    grown_mib = (_rss_kib(pid) - before) / 1024
    assert sent > 60 * 1024 * 1024  # far more was sent than the bound
    assert grown_mib < 16 + 30 * 0.25 + 16, f"broker RSS grew {grown_mib:.0f} MiB"
    for s in socks:
        s.close()
    # Memory is given back when those connections close: the broker serves a producer again.
    topic = unique("mem")
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    errors = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0 and errors == [None]
