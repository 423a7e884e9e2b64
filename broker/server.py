"""The socket server: length-prefixed frames in, responses out in request order.

Each connection is an ``asyncio.Protocol`` with one task that takes frames in
arrival order and awaits each handler before the next, as Kafka mutes a channel
while a request is in flight; reading pauses when too many frames queue up, and
writing waits when the transport's buffer is full.

What Kafka does with bad input, we do too:
- a frame longer than ``socket.request.max.bytes`` or with a negative size closes
  the connection (Kafka's InvalidReceiveException);
- an unknown API key, or a body that does not parse, closes the connection;
- ApiVersions at a version we do not serve gets a v0 response with
  UNSUPPORTED_VERSION and our ranges (KIP-511), so the client can retry lower;
- any other API at a version we do not serve closes the connection.
A handler that raises is logged with its traceback and the connection is closed;
nothing a client sends can stop the broker or touch another connection.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import struct

from broker.dispatch import HANDLERS, RequestContext
from protocol.errors import Errors
from protocol.messages.api_versions import ApiVersionsResponse
from protocol.messages.registry import ApiKey
from protocol.messages.request_header import RequestHeader
from protocol.primitives import DecodeError, frame_parts

log = logging.getLogger("sharebroker.server")

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
_CORR = struct.Struct(">ii")
MAX_QUEUED_FRAMES = 64


class ProtocolViolation(Exception):
    """The peer broke the framing or the protocol; the connection is closed."""


class Connection(asyncio.Protocol):
    def __init__(self, server: "Server"):
        self.server = server
        self.broker = server.broker
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._buf = bytearray()
        self._frames: collections.deque = collections.deque()
        self._waiter: asyncio.Future | None = None
        self._drain: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._reading_paused = False
        self._close_hooks: list = []
        self.closed = False
        self.auth = None  # set by SASL handlers

    # ------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        if len(self.server.connections) >= self.server.max_connections:
            log.warning("refusing connection from %s: max.connections reached", self.peer)
            transport.abort()
            self.closed = True
            return
        self.server.connections.add(self)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        n = len(buf)
        max_bytes = self.server.max_request_bytes
        while n - pos >= 4:
            size = _SIZE.unpack_from(buf, pos)[0]
            if size < 0 or size > max_bytes:
                log.warning("closing %s: frame size %d outside 0..%d (socket.request.max.bytes)",
                            self.peer, size, max_bytes)
                self.close()
                return
            end = pos + 4 + size
            if end > n:
                break
            self._frames.append(bytes(buf[pos + 4:end]))
            pos = end
        if pos:
            del buf[:pos]
        if self._frames:
            if len(self._frames) >= MAX_QUEUED_FRAMES and not self._reading_paused:
                self._reading_paused = True
                self.transport.pause_reading()
            w = self._waiter
            if w is not None and not w.done():
                w.set_result(None)

    def pause_writing(self) -> None:
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        d, self._drain = self._drain, None
        if d is not None and not d.done():
            d.set_result(None)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.server.connections.discard(self)
        if self._task is not None:
            self._task.cancel()
        self.resume_writing()
        hooks, self._close_hooks = self._close_hooks, []
        for hook in hooks:
            try:
                hook(self)
            except Exception:  # a failing hook must not stop the others
                log.exception("connection close hook failed")

    # ------------------------------------------------------------ helpers for handlers
    def on_close(self, hook) -> None:
        """Run ``hook(connection)`` once when the connection closes."""
        if self.closed:
            hook(self)
        else:
            self._close_hooks.append(hook)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.abort()

    # ------------------------------------------------------------ request loop
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        frames = self._frames
        try:
            while not self.closed:
                if not frames:
                    self._waiter = loop.create_future()
                    await self._waiter
                    self._waiter = None
                    continue
                frame = frames.popleft()
                if self._reading_paused and len(frames) < MAX_QUEUED_FRAMES // 2:
                    self._reading_paused = False
                    self.transport.resume_reading()
                await self._process(frame)
                if self._drain is not None:
                    await self._drain
        except asyncio.CancelledError:
            pass
        except ProtocolViolation as e:
            log.warning("closing %s: %s", self.peer, e)
            self.close()
        except Exception:
            log.exception("closing %s after an internal error", self.peer)
            self.close()

    async def _process(self, frame: bytes) -> None:
        if len(frame) < 8:
            raise ProtocolViolation(f"frame of {len(frame)} bytes is too short for a request header")
        api_key, version, correlation_id = _HEAD.unpack_from(frame, 0)
        h = HANDLERS[api_key] if 0 <= api_key < len(HANDLERS) else None
        if h is None:
            raise ProtocolViolation(f"unknown API key {api_key}")
        if not h.min_version <= version <= h.max_version:
            if api_key == ApiKey.API_VERSIONS:
                self._send_unsupported_api_versions(correlation_id)
                return
            raise ProtocolViolation(f"{ApiKey(api_key).name} v{version} is not supported "
                                    f"(served {h.min_version}-{h.max_version})")
        cls = h.request_cls
        flexible = cls.FLEXIBLE_VERSION is not None and version >= cls.FLEXIBLE_VERSION
        m = memoryview(frame)
        try:
            header, pos = RequestHeader.decode_from(m, 0, 2 if flexible else 1)
            req, end = cls.decode_from(m, pos, version)
        except (DecodeError, ValueError, IndexError, struct.error) as e:
            raise ProtocolViolation(f"malformed {ApiKey(api_key).name} v{version} request: {e}") from None
        ctx = RequestContext(self.broker, self, api_key, version, correlation_id, header.client_id)
        resp = await h.fn(ctx, req)
        if resp is None or self.closed:
            return
        self.send_response(ctx, resp, flexible)

    def send_response(self, ctx: RequestContext, resp, flexible: bool) -> None:
        b = bytearray(8)
        _CORR.pack_into(b, 0, 0, ctx.correlation_id)
        # The ApiVersions response header is always v0 (no tagged fields), whatever the version.
        if flexible and ctx.api_key != ApiKey.API_VERSIONS:
            b.append(0)
        sp: list = []
        resp.encode_into(b, ctx.api_version, sp)
        size = len(b) - 4 + sum(len(c) for _, c in sp)
        _SIZE.pack_into(b, 0, size)
        if sp:
            self.transport.writelines(frame_parts(b, sp))
        else:
            self.transport.write(b)

    def _send_unsupported_api_versions(self, correlation_id: int) -> None:
        resp = ApiVersionsResponse(error_code=Errors.UNSUPPORTED_VERSION,
                                   api_keys=self.server.api_version_entries())
        b = bytearray(8)
        _CORR.pack_into(b, 0, 0, correlation_id)
        resp.encode_into(b, 0)
        _SIZE.pack_into(b, 0, len(b) - 4)
        self.transport.write(b)


class Server:
    def __init__(self, broker, host: str, port: int):
        self.broker = broker
        self.host = host
        self.port = port
        self.connections: set[Connection] = set()
        cfg = broker.config
        self.max_request_bytes = cfg.get_int("socket.request.max.bytes", 100 * 1024 * 1024)
        self.max_connections = cfg.get_int("max.connections", 2147483647)
        self._server: asyncio.base_events.Server | None = None

    def api_version_entries(self) -> list:
        out = []
        for h in HANDLERS:
            if h is not None:
                out.append(ApiVersionsResponse.ApiVersion(
                    api_key=h.api_key, min_version=h.advertised_min, max_version=h.max_version))
        return out

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), self.host, self.port,
                                                reuse_address=True, backlog=1024)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for c in list(self.connections):
            c.close()
        if self._server is not None:
            await self._server.wait_closed()
