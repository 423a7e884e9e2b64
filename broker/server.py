"""The socket server: length-prefixed frames in, responses out in request order.

Each connection is an ``asyncio.BufferedProtocol`` with one task that takes frames
in arrival order and awaits each handler before the next, as Kafka mutes a channel
while a request is in flight; reading pauses when too many frames queue up, and
writing waits when the transport's buffer is full.

Every request goes through one pipeline (:meth:`Connection._process`): decode ->
authenticate -> authorize (the handler's declared ``acl``) -> time and count ->
handler -> quotas; the stages are the components in ``broker.pipeline`` and
``broker.quotas`` (a throttled connection is muted with :meth:`Connection.throttle`).

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
import mmap
import os
import struct
import time

from broker.dispatch import HANDLERS, RequestContext, api_version_ranges
from broker.pipeline import ANONYMOUS
from protocol.errors import Errors
from protocol.messages.api_versions import ApiVersionsResponse
from protocol.messages.registry import ApiKey
from protocol.messages.request_header import RequestHeader
from protocol.primitives import DecodeError, FileChunk, frame_parts

log = logging.getLogger("sharebroker.server")

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
_CORR = struct.Struct(">ii")
MAX_QUEUED_FRAMES = 64
SCRATCH_BYTES = 32 * 1024
SMALL_FRAME_BYTES = 2 * 1024 * 1024  # larger incomplete frames are read into an anonymous mapping
METERED_READ = 256 * 1024  # one read into such a frame takes at most this much
# queued.max.request.bytes is -1 (no bound) in Kafka, where queued.max.requests bounds the count;
# here -1 means this bound, so connections announcing large frames cannot exhaust memory.
DEFAULT_REQUEST_MEMORY = 256 * 1024 * 1024


class ProtocolViolation(Exception):
    """The peer broke the framing or the protocol; the connection is closed."""


class Connection(asyncio.BufferedProtocol):
    """One client connection: frames in (read once into their own buffer), responses out in order.

    Reading uses ``asyncio.BufferedProtocol``: small frames arrive in a per-connection
    scratch buffer and are copied once into a ``bytearray`` of their own; a frame that
    is not complete in the scratch buffer gets its own ``bytearray`` at once and the
    transport reads the rest of it straight into that buffer, so a large produce
    batch is never copied in Python.  The decoded request's ``records`` are writable
    memoryview slices of the frame, which lets the log rewrite the base offset in place.
    """

    def __init__(self, server: "Server", listener=None):
        self.server = server
        self.components = server.components
        self.listener = listener  # broker.security.listeners.Listener (None: the server's default stages)
        self.authenticator = listener.authenticator if listener is not None else server.authenticator
        self.sasl = None  # broker.security.sasl.SaslSession on a SASL listener
        self.close_after_response = False  # failed login: answer, then close (as Kafka)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._scratch = bytearray(SCRATCH_BYTES)
        self._sv = memoryview(self._scratch)
        self._start = 0  # unparsed bytes are self._scratch[self._start:self._end]
        self._end = 0
        self._frame: bytearray | None = None  # a frame being read straight into its own buffer
        self._fview: memoryview | None = None
        self._fill = 0
        self._frames: collections.deque = collections.deque()
        self._waiter: asyncio.Future | None = None
        self._drain: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._reading_paused = False
        self._paused_frames = False  # too many frames queued
        self._paused_memory = False  # the request memory (queued.max.request.bytes) is used up
        self._paused_throttle = False  # muted by a quota (KIP-219) until self._throttled_until
        self._throttled_until = 0.0  # server.clock() time; written by throttle(), cleared once sat out
        self._frame_metered = False  # the frame being read is metered by bytes received
        self._held = 0  # request-memory bytes this connection holds
        self._close_hooks: list = []
        self.closed = False
        self._sock_fd = -1  # the socket for os.sendfile (-1: not usable)
        self.busy = False  # a request is being handled
        self.last_active = server.clock()
        self.principal = ANONYMOUS

    # ------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.host = peer[0] if peer else "?"
        sock = transport.get_extra_info("socket")
        # os.sendfile needs the plain socket; a TLS transport encrypts in user space.
        tls = (self.listener is not None and self.listener.tls) or transport.get_extra_info("sslcontext") is not None
        self._sock_fd = sock.fileno() if sock is not None and not tls else -1
        refusal = self.server.admit(self)
        if refusal is not None:
            log.warning("refusing connection from %s: %s", self.peer, refusal)
            transport.abort()
            self.closed = True
            return
        self.authenticator.connected(self)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            if self._frame_metered:  # at most METERED_READ past the memory bound per connection
                return self._fview[self._fill:self._fill + METERED_READ]
            return self._fview[self._fill:]
        return self._sv[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self.server.clock()
        if self._frame is not None:
            if self._frame_metered:
                self.server.memory.take(nbytes)
                self._held += nbytes
            self._fill += nbytes
            if self._fill == len(self._frame):
                self._frames.append(self._frame)
                self._frame = self._fview = None
                self._frames_ready()
            elif self._frame_metered and self.server.memory.exhausted():
                self._wait_for_memory()
            return
        self._end += nbytes
        self._parse()

    def _parse(self) -> None:
        """Cut complete frames out of the scratch buffer; start the frame that is not complete."""
        sv, pos, end = self._sv, self._start, self._end
        server = self.server
        max_bytes = server.max_request_bytes
        memory = server.memory
        while end - pos >= 4:
            size = _SIZE.unpack_from(sv, pos)[0]
            if size < 0 or size > max_bytes:
                log.warning("closing %s: frame size %d outside 0..%d (socket.request.max.bytes)",
                            self.peer, size, max_bytes)
                self.close()
                return
            if memory.exhausted():
                self._wait_for_memory()
                break
            body = pos + 4
            if end - body >= size:
                memory.take(size)
                self._held += size
                self._frames.append(bytearray(sv[body:body + size]))
                pos = body + size
                continue
            # Incomplete: give the frame its own buffer and let the transport fill it directly.
            # A large frame lives in an anonymous mapping whose pages are committed only as
            # bytes arrive, and is metered by the bytes received, so a client announcing a
            # large frame and sending little costs little.
            have = end - body
            if size <= SMALL_FRAME_BYTES:
                frame = bytearray(size)
                memory.take(size)
                self._held += size
                self._frame_metered = False
            else:
                frame = mmap.mmap(-1, size)
                memory.take(have)
                self._held += have
                self._frame_metered = True
            self._frame = frame
            self._fview = memoryview(frame)
            self._fview[:have] = sv[body:end]
            self._fill = have
            pos = end
            break
        if pos == end:
            self._start = self._end = 0
        else:  # a partial size prefix, or a frame waiting for memory: move it to the front
            left = end - pos
            self._scratch[:left] = sv[pos:end]
            self._start, self._end = 0, left
        if self._frames:
            self._frames_ready()

    def eof_received(self) -> bool:
        return False

    def _frames_ready(self) -> None:
        if len(self._frames) >= MAX_QUEUED_FRAMES and not self._paused_frames:
            self._paused_frames = True
            self._update_reading()
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _update_reading(self) -> None:
        """Pause reading while too many frames are queued or the request memory is used up."""
        if self.closed:
            return
        paused = self._paused_frames or self._paused_memory or self._paused_throttle
        if paused != self._reading_paused:
            self._reading_paused = paused
            if paused:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _wait_for_memory(self) -> None:
        if not self._paused_memory:
            self._paused_memory = True
            self._update_reading()
            self.server.memory.wait(self)

    def memory_available(self) -> None:
        """Called by the request memory when bytes were given back."""
        self._paused_memory = False
        self._update_reading()
        if self._frame is None and not self.closed:
            self._parse()  # a frame that waited in the scratch buffer

    def _release(self, nbytes: int) -> None:
        if nbytes:
            self._held -= nbytes
            self.server.memory.give(nbytes)

    def pause_writing(self) -> None:
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        d, self._drain = self._drain, None
        if d is not None and not d.done():
            d.set_result(None)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.server.forget(self)
        self._frames.clear()
        self._frame = self._fview = None
        self._release(self._held)
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

    def throttle(self, ms: int) -> None:
        """Mute this connection for ``ms`` from now (a quota's throttle, KIP-219; Kafka's
        ThrottledChannel): once the current response is written nothing more is read or handled
        until then, so a client that ignores ``throttle_time_ms`` is held all the same."""
        until = self.server.clock() + ms / 1000.0
        if until > self._throttled_until:
            self._throttled_until = until

    async def _sit_out_throttle(self) -> None:
        delay = self._throttled_until - self.server.clock()
        self._throttled_until = 0.0
        if delay <= 0 or self.closed:
            return
        self.busy = True  # not idle: held (connections.max.idle.ms does not apply)
        self._paused_throttle = True
        self._update_reading()
        try:
            await asyncio.sleep(delay)
        finally:
            self.busy = False
            self._paused_throttle = False
            self._update_reading()
            self.last_active = self.server.clock()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.abort()

    def close_after_flush(self) -> None:
        """Close once what is queued (the last response) is written."""
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

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
                if self._paused_frames and len(frames) < MAX_QUEUED_FRAMES // 2:
                    self._paused_frames = False
                    self._update_reading()
                self.busy = True
                try:
                    await self._process(frame)
                finally:
                    self.busy = False
                    # a large frame was metered by the bytes received, which are its size now
                    self._release(len(frame))
                    del frame
                self.last_active = self.server.clock()
                if self._drain is not None:
                    await self._drain
                if self._throttled_until:
                    await self._sit_out_throttle()
        except asyncio.CancelledError:
            pass
        except ProtocolViolation as e:
            log.warning("closing %s: %s", self.peer, e)
            self.close()
        except Exception:
            log.exception("closing %s after an internal error", self.peer)
            self.close()

    async def _process(self, frame: bytearray) -> None:
        """The request pipeline: decode -> authenticate -> authorize -> time and count -> handler."""
        sasl = self.sasl
        if sasl is not None and sasl.raw:  # SaslHandshake v0: the tokens come without a request header
            self._raw_sasl_token(frame)
            return
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
        server = self.server
        if not self.authenticator.admits(self, api_key):
            raise ProtocolViolation(f"{ApiKey(api_key).name} before authentication (or after the session expired)")
        ctx = RequestContext(self.components, self, api_key, version, correlation_id, header.client_id,
                             self.principal, self.listener, self.host)
        if h.acl and not server.authorizer.authorize(ctx, h.acl):
            raise ProtocolViolation(f"{ctx.principal} is not authorized for {ApiKey(api_key).name}")
        metrics = server.metrics
        quotas = server.quotas
        q = ctx.quota = quotas.start(self, api_key, self.principal, header.client_id, len(frame)) \
            if quotas.active else None
        t0 = time.perf_counter()
        try:
            resp = await (h.fn(ctx, req) if q is None else q.timed(h.fn(ctx, req)))
        except BaseException:
            metrics.failed(api_key)
            raise
        finally:
            metrics.observe(api_key, time.perf_counter() - t0)
        if q is not None:
            q.finish(resp)  # throttle_time_ms into the response; this connection muted (KIP-219)
        if resp is None or self.closed:
            return
        self.send_response(ctx, resp, flexible)
        if self.close_after_response:
            self.close_after_flush()

    def _raw_sasl_token(self, frame: bytearray) -> None:
        """One token of the legacy (handshake v0) exchange: answer it raw, or close on failure."""
        out = self.authenticator.raw_token(self, bytes(frame))
        if out is None:
            raise ProtocolViolation("SASL authentication failed")
        self.transport.write(_SIZE.pack(len(out)) + out)

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
        self.last_active = self.server.clock()
        if not sp:
            self.transport.write(b)
            return
        parts = frame_parts(b, sp)
        if any(type(p) is FileChunk for p in parts):
            self._send_with_files(parts)
        else:
            self.transport.writelines(parts)

    def _send_with_files(self, parts: list) -> None:
        """Write a response whose record chunks are still in segment files.

        A chunk goes out with ``os.sendfile`` straight from the page cache when nothing
        is queued in the transport before it (so bytes keep their order); what the
        socket does not take at once, or any chunk behind queued bytes, is read with
        ``pread`` and queued in the transport like any other part.
        """
        t = self.transport
        pending: list = []
        for part in parts:
            if type(part) is not FileChunk:
                pending.append(part)
                continue
            if pending:
                t.writelines(pending)
                pending = []
            sent = 0
            if self._sock_fd >= 0 and t.get_write_buffer_size() == 0:
                try:
                    while sent < part.size:
                        n = os.sendfile(self._sock_fd, part.fd, part.pos + sent, part.size - sent)
                        if n == 0:
                            break
                        sent += n
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:  # the connection broke: the transport will notice and close
                    self._sock_fd = -1
            if sent < part.size:
                pending.append(os.pread(part.fd, part.size - sent, part.pos + sent))
        if pending:
            t.writelines(pending)

    def _send_unsupported_api_versions(self, correlation_id: int) -> None:
        resp = ApiVersionsResponse(error_code=Errors.UNSUPPORTED_VERSION, api_keys=api_version_entries())
        b = bytearray(8)
        _CORR.pack_into(b, 0, 0, correlation_id)
        resp.encode_into(b, 0)
        _SIZE.pack_into(b, 0, len(b) - 4)
        self.transport.write(b)


class RequestMemory:
    """Bytes held by requests that are buffered but not yet handled, across all connections.

    ``queued.max.request.bytes`` semantics, as Kafka's non-strict memory pool: a request
    may take memory while any is left (so one request may go past the bound), and a
    connection that finds none left stops reading until some is given back.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.used = 0
        self._waiting: collections.deque = collections.deque()

    def exhausted(self) -> bool:
        return self.used >= self.capacity

    def take(self, nbytes: int) -> None:
        self.used += nbytes

    def give(self, nbytes: int) -> None:
        self.used -= nbytes
        while self._waiting and not self.exhausted():
            conn = self._waiting.popleft()
            if not conn.closed:
                conn.memory_available()

    def wait(self, conn) -> None:
        self._waiting.append(conn)


def api_version_entries() -> list:
    """The ApiVersions entries: exactly the registered handlers' ranges."""
    return [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in api_version_ranges()]


class Server:
    """The listeners: accept connections and run each one's requests through the pipeline.

    Connection limits and request memory are shared by every listener, as in Kafka's
    SocketServer; each listener has its own TLS context and authenticator.
    """

    def __init__(self, components, listeners: list):
        self.components = components
        self.listeners = listeners
        self.host = listeners[0].host
        self.port = listeners[0].port
        self.connections: set[Connection] = set()
        cfg = components.config
        self.max_request_bytes = cfg.get_int("socket.request.max.bytes", 100 * 1024 * 1024)
        self.max_connections = cfg.get_int("max.connections", 2147483647)
        self.max_per_ip = cfg.get_int("max.connections.per.ip", 2147483647)
        self.max_per_ip_overrides = parse_per_ip_overrides(cfg.get("max.connections.per.ip.overrides", ""))
        self.idle_ms = cfg.get_int("connections.max.idle.ms", 600000)
        queued = cfg.get_int("queued.max.request.bytes", -1)
        self.memory = RequestMemory(queued if queued > 0 else max(DEFAULT_REQUEST_MEMORY, self.max_request_bytes))
        self.authenticator = components.authenticator
        self.authorizer = components.authorizer
        self.metrics = components.request_metrics
        self.quotas = components.quotas
        self.per_ip: collections.Counter = collections.Counter()
        self.clock = time.monotonic
        self._servers: list = []
        self._idle_sweep: asyncio.TimerHandle | None = None

    def admit(self, conn: Connection) -> str | None:
        """Register a new connection, or say why it is refused (max.connections, per IP)."""
        if len(self.connections) >= self.max_connections:
            return "max.connections reached"
        limit = self.max_per_ip_overrides.get(conn.host, self.max_per_ip)
        if self.per_ip[conn.host] >= limit:
            return f"address already has the configured maximum of {limit} connections (max.connections.per.ip)"
        self.connections.add(conn)
        self.per_ip[conn.host] += 1
        return None

    def forget(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.per_ip[conn.host] -= 1
            if self.per_ip[conn.host] <= 0:
                del self.per_ip[conn.host]

    def _sweep_idle(self) -> None:
        """Close connections with no traffic for connections.max.idle.ms (none with a request in hand)."""
        deadline = self.clock() - self.idle_ms / 1000.0
        for conn in [c for c in self.connections if not c.busy and c.last_active < deadline]:
            log.info("closing %s: idle for more than %d ms (connections.max.idle.ms)", conn.peer, self.idle_ms)
            conn.close()
        self._schedule_idle_sweep()

    def _schedule_idle_sweep(self) -> None:
        if self.idle_ms >= 0:
            interval = min(max(self.idle_ms / 4000.0, 0.05), 30.0)
            self._idle_sweep = asyncio.get_running_loop().call_later(interval, self._sweep_idle)

    async def start(self) -> None:
        """Bind every listener (raises OSError naming the address that failed)."""
        loop = asyncio.get_running_loop()
        for lst in self.listeners:
            try:
                srv = await loop.create_server(lambda lst=lst: Connection(self, lst), lst.host, lst.port,
                                               reuse_address=True, backlog=1024, ssl=lst.ssl_context)
            except OSError as e:
                await self.close()
                raise OSError(e.errno, f"listener {lst.name} {lst.host}:{lst.port}: {e.strerror or e}") from None
            self._servers.append(srv)
            lst.bound(srv.sockets[0].getsockname()[1])
        self.port = self.listeners[0].port
        self._schedule_idle_sweep()

    async def close(self) -> None:
        if self._idle_sweep is not None:
            self._idle_sweep.cancel()
        for srv in self._servers:
            srv.close()
        for c in list(self.connections):
            c.close()
        for srv in self._servers:
            await srv.wait_closed()
        self._servers = []


def parse_per_ip_overrides(value: str | None) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs, comma-separated."""
    out: dict[str, int] = {}
    for item in (value or "").split(","):
        item = item.strip()
        if item:
            host, _, count = item.rpartition(":")
            out[host.strip()] = int(count)
    return out
