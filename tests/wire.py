"""A minimal Kafka wire client built on our own codec, for protocol-level tests.

It speaks exactly what a test asks for (any API, any version) over one socket, so
tests can send what real clients cannot (ShareFetch v2, RENEW, bad epochs, ...).
"""
from __future__ import annotations

import socket
import struct

from protocol.messages.request_header import RequestHeader
from protocol.messages.response_header import ResponseHeader

_SIZE = struct.Struct(">i")


class WireClient:
    def __init__(self, bootstrap: str, client_id: str = "wire-test", timeout: float = 30.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id
        self._corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def frame(self, req, version: int) -> tuple[int, bytes]:
        """The next correlation id and the size-prefixed frame of ``req`` at ``version``, not sent
        (to write many requests in one go, then ``receive`` their responses in order)."""
        cls = type(req)
        flexible = cls.FLEXIBLE_VERSION is not None and version >= cls.FLEXIBLE_VERSION
        self._corr += 1
        header = RequestHeader(request_api_key=cls.API_KEY, request_api_version=version,
                               correlation_id=self._corr, client_id=self.client_id)
        body = header.encode(2 if flexible else 1) + req.encode(version)
        return self._corr, _SIZE.pack(len(body)) + body

    def send(self, req, version: int) -> int:
        corr, data = self.frame(req, version)
        self.sock.sendall(data)
        return corr

    def send_raw(self, payload: bytes) -> None:
        self.sock.sendall(payload)

    def recv_frame(self) -> bytes:
        size = _SIZE.unpack(self._read(4))[0]
        return self._read(size)

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def receive(self, api_key: int, version: int):
        """Read the next response frame and decode it as ``api_key`` at ``version``;
        returns ``(correlation_id, response)``.  For pipelined requests (several ``send``
        calls before reading), call it once per request, in the order they were sent."""
        from protocol.messages.registry import RESPONSES

        frame = memoryview(self.recv_frame())
        resp_cls = RESPONSES[api_key]
        flexible = resp_cls.FLEXIBLE_VERSION is not None and version >= resp_cls.FLEXIBLE_VERSION
        header_version = 1 if flexible and api_key != 18 else 0
        header, pos = ResponseHeader.decode_from(frame, 0, header_version)
        return header.correlation_id, resp_cls.decode_from(frame, pos, version)[0]

    def request(self, req, version: int):
        """Send ``req`` at ``version`` and decode the matching response."""
        corr = self.send(req, version)
        got, resp = self.receive(type(req).API_KEY, version)
        assert got == corr, f"correlation id {got}, expected {corr}"
        return resp
