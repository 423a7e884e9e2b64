"""Shared fixtures for the integration tests: real brokers (subprocesses), real clients, 127.0.0.1 only.

- Every ``BrokerProcess`` started while a test runs is checked for Python tracebacks in its
  log after each test: the one check lives in ``tests/conftest.py``.
- ``broker_factory(config=None, data_dir=None)`` starts a ``Broker`` (a ``BrokerProcess``
  whose ``start()`` waits for the new process to accept connections); every broker it
  started is stopped at teardown.
- ``wait_until(cond, timeout, what)`` polls ``cond`` until it returns a truthy value
  (returned) or fails the test at the deadline.  No test sleeps for a fixed time.
- ``consume_range(bootstrap, topic, partition, start, end)`` reads offsets [start, end)
  with a confluent-kafka consumer (assign, no group membership) and returns the messages.
"""
from __future__ import annotations

import itertools
import time

import pytest

from broker.testing import BrokerProcess
from tests.support import unique, until

_names = itertools.count()


# The traceback check lives in tests/conftest.py (every test directory); ``tracebacks`` is
# re-exported here for the pipeline tests.
from broker.testing import tracebacks  # noqa: E402,F401


@pytest.fixture(name="wait_until")
def _wait_until():
    return until


@pytest.fixture(name="unique_name")
def _unique_name():
    return unique


# BrokerProcess.start() returns only once its own process accepts connections.
Broker = BrokerProcess


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def make(config: dict | None = None, data_dir=None, start: bool = True) -> Broker:
        d = data_dir or tmp_path / f"broker-{len(started)}"
        b = Broker(d, config={k: str(v) for k, v in (config or {}).items()})
        started.append(b)
        return b.start() if start else b

    yield make
    for b in started:
        b.stop()


def _consume_range(bootstrap: str, topic: str, partition: int, start: int, end: int,
                   timeout: float = 20.0, reset: str = "error", extra: dict | None = None) -> list:
    """Messages at offsets [start, end) of one partition, fetched by a real consumer."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
                  "auto.offset.reset": reset, "enable.partition.eof": False, **(extra or {})})
    out = []
    try:
        if end <= start:
            return out
        c.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                if m.error():
                    raise AssertionError(f"consumer error: {m.error()}")
                out.append(m)
            if out and out[-1].offset() >= end - 1:
                break
        else:
            raise AssertionError(f"read {len(out)} messages of {topic}-{partition} [{start}, {end}) "
                                 f"in {timeout}s; last offset {out[-1].offset() if out else None}")
    finally:
        c.close()
    return [m for m in out if m.offset() < end]


@pytest.fixture(name="consume_range")
def _consume_range_fixture():
    return _consume_range


class RawConnection:
    """One plain TCP connection speaking Kafka frames with the project's codec."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0):
        import socket

        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.timeout = timeout
        self._corr = 0

    # ------------------------------------------------------------ frames
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, payload: bytes) -> None:
        import struct

        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def recv_frame(self) -> bytes | None:
        """The next response frame (without its size), or None if the broker closed the connection."""
        import struct

        try:
            head = self._recv_exact(4)
            if head is None:
                return None
            body = self._recv_exact(struct.unpack(">i", head)[0])
        except ConnectionResetError:
            return None
        return body

    def closed_by_peer(self) -> bool:
        """True if the broker closes the connection (EOF or reset) before sending anything more."""
        return self.recv_frame() is None

    # ------------------------------------------------------------ requests
    @staticmethod
    def encode_request(api_key: int, version: int, req, correlation_id: int, client_id: str | None = "it") -> bytes:
        from protocol.messages.request_header import RequestHeader

        flexible = req.FLEXIBLE_VERSION is not None and version >= req.FLEXIBLE_VERSION
        header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                               client_id=client_id).encode(2 if flexible else 1)
        return header + req.encode(version)

    def request(self, req, version: int, api_key: int | None = None):
        """Send ``req`` (a generated request object) and decode the matching response."""
        from protocol.messages.registry import RESPONSES

        key = req.API_KEY if api_key is None else api_key
        self._corr += 1
        corr = self._corr
        self.send_frame(self.encode_request(key, version, req, corr))
        frame = self.recv_frame()
        assert frame is not None, f"connection closed instead of answering API {key} v{version}"
        import struct

        assert struct.unpack_from(">i", frame)[0] == corr, "correlation id mismatch"
        resp_cls = RESPONSES[key]
        flexible = resp_cls.FLEXIBLE_VERSION is not None and version >= resp_cls.FLEXIBLE_VERSION
        # response header v1 (tagged fields) for flexible versions, except ApiVersions (always v0)
        pos = 4 + (1 if flexible and key != 18 else 0)
        return resp_cls.decode(frame[pos:], version)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture(name="raw_connection")
def _raw_connection():
    """``raw_connection(port)`` opens a RawConnection; all are closed at teardown."""
    opened: list[RawConnection] = []

    def connect(port: int, timeout: float = 10.0) -> RawConnection:
        c = RawConnection(port, timeout=timeout)
        opened.append(c)
        return c

    yield connect
    for c in opened:
        c.close()
