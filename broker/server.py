"""The socket server: length-prefixed frames in, responses out in request order.

Each connection is an ``asyncio.BufferedProtocol`` with one task that takes frames
in arrival order and awaits each handler before the next, as Kafka mutes a channel
while a request is in flight; reading pauses when too many frames queue up, and
writing waits when the transport's buffer is full.

Every request goes through one pipeline (:meth:`Connection._process`): decode ->
authenticate -> authorize (the handler's declared ``acl``) -> time and count ->
handler -> quotas; the stages are the components in ``broker.pipeline`` and
``broker.quotas`` (a throttled connection is muted with :meth:`Connection.throttle`).
A handler with a fast path (``broker.dispatch``, Produce) may answer its common case
right after the header is decoded and authenticated, timed, counted and throttled the
same way.

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
import os
import struct
import time

from broker.acceptor import Acceptor, listening_sockets
from broker.dispatch import HANDLERS, Deferred, RequestContext, api_version_ranges
from broker.pipeline import ANONYMOUS
from broker.request_memory import SMALL_FRAME_BYTES, SMALL_REQUEST_BYTES, FrameBuffers, RequestMemory, trim_heap
from protocol.errors import Errors
from protocol.lazy_messages import ApiVersionsResponse
from protocol.messages.registry import ApiKey
from protocol.messages.request_header import RequestHeader
from protocol.primitives import DecodeError, FileChunk, frame_parts

log = logging.getLogger("sharebroker.server")

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
_CORR = struct.Struct(">ii")
_THROTTLE = struct.Struct(">i")
MAX_QUEUED_FRAMES = 64
SCRATCH_SMALL = 4 * 1024  # a connection's scratch buffer until a read fills it...
SCRATCH_BYTES = 32 * 1024  # ...then this, until the connection has been quiet for SCRATCH_SHRINK_S
SCRATCH_SHRINK_S = 5.0
METERED_READ = 256 * 1024  # one read into a frame's own buffer takes at most this much
# queued.max.request.bytes is -1 (no bound) in Kafka, where queued.max.requests bounds the count;
# here -1 means this bound, so connections announcing large frames cannot exhaust memory.
DEFAULT_REQUEST_MEMORY = 256 * 1024 * 1024
DEFAULT_READ_TIMEOUT_MS = 30000  # sharebroker.request.read.timeout.ms
TRIM_AFTER_BYTES = 8 * 1024 * 1024  # freed request bytes, or...
TRIM_AFTER_CLOSES = 100  # ...closed connections, after which the heap is trimmed at the next sweep

# Why a connection is not reading (bits of Connection._pauses; Connection._update_reading applies them).
PAUSE_FRAMES = 1  # too many of its frames are queued (its own pipelining)
PAUSE_MEMORY = 2  # the request memory refused its next bytes
PAUSE_CLOSING = 4  # a failed login was answered; the connection closes after a delay (no more reads)
PAUSE_THROTTLE = 8  # muted by a client quota (KIP-219) until Connection._throttled_until


class ProtocolViolation(Exception):
    """The peer broke the framing or the protocol; the connection is closed."""


class Connection(asyncio.BufferedProtocol):
    """One client connection: frames in (read once into their own buffer), responses out in order.

    Reading uses ``asyncio.BufferedProtocol``: small frames arrive in a per-connection
    scratch buffer (4 KiB, 32 KiB while the connection is busy) and are copied once into
    a ``bytearray`` of their own; a frame that fits in 32 KiB waits in the scratch buffer
    until it is complete (so the memory takes it as a complete request); a larger one gets
    its own buffer at once (a ``bytearray`` up to 64 KiB, above that a reused anonymous
    mapping from ``FrameBuffers``) and the transport reads the rest of it straight into
    that buffer, so a large produce batch is never copied in Python.  The decoded
    request's ``records`` are writable memoryview slices of the frame, which lets the log
    rewrite the base offset in place.

    Whether the connection reads is decided in one place, :meth:`_update_reading`, from
    the reasons in ``_pauses`` (``PAUSE_*``; :meth:`pause_for` / :meth:`resume_for` add
    and remove one).  The request memory (``broker.request_memory.RequestMemory``) is
    asked before every read of frame bytes.
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
        self._scratch = bytearray(SCRATCH_SMALL)  # replaced by a larger one when a read fills it
        self._sv = memoryview(self._scratch)
        self._start = 0  # unparsed bytes are self._scratch[self._start:self._end]
        self._end = 0
        # The frame being read straight into its own buffer (a bytearray, or a memoryview from
        # server.buffers), how much of it has arrived, and whether the memory meters each read.
        self._frame: bytearray | memoryview | None = None
        self._fview: memoryview | None = None
        self._fill = 0
        self._frame_metered = False
        self._frames: collections.deque = collections.deque()
        self._waiter: asyncio.Future | None = None
        self._drain: asyncio.Future | None = None
        self._tail: asyncio.Task | None = None  # the last deferred answer (dispatch.Deferred) not yet sent
        self._task: asyncio.Task | None = None
        self._pauses = 0  # PAUSE_* bits: why the connection does not read
        self._throttled_until = 0.0  # server.clock() time; written by throttle(), cleared once sat out
        self._reading_paused = False  # what the transport was last told
        # Request-memory bytes: all this connection holds (queued frames, the partial frame and its
        # reservation); of which the partial frame's (received, or whole for a small one, plus the
        # reservation); of which reserved and not yet received.  Given back as frames are handled
        # and all at once when the connection closes.
        self._held = 0
        self._partial = 0
        self._reserved = 0
        self._promoted = False  # the frame being read took its whole size as a complete one (SMALL_REQUEST_BYTES)
        self._close_hooks: list = []
        self.closed = False
        self._sock_fd = -1  # the socket for os.sendfile (-1: not usable)
        self.busy = False  # a request is being handled
        self.last_active = server.clock()
        # The read timeout's clock: the last byte received, or when reading last resumed.
        self._progress_at = self.last_active
        self.principal = ANONYMOUS
        self.quota_account = None  # broker.quotas.ClientAccount of the last counted request (written there)

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
            if self._frame_metered:  # at most METERED_READ, and no more than the memory admits now
                window = METERED_READ if self._reserved else self.server.memory.partial_room(self._held)
                # (room gone since the last check: other frames read meanwhile) one byte, then it waits
                return self._fview[self._fill:self._fill + max(1, min(window, METERED_READ))]
            return self._fview[self._fill:]
        return self._sv[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self._progress_at = self.server.clock()
        if self._frame is not None:
            if self._frame_metered:
                self._count(nbytes)
            self._fill += nbytes
            if self._fill == len(self._frame):
                self._frame_done()
            elif self._frame_metered and not self._may_read_frame():
                self._wait_for_memory()
            return
        self._end += nbytes
        filled = self._end == len(self._scratch)
        self._parse()
        if filled and len(self._scratch) < SCRATCH_BYTES and not self.closed:
            self._resize_scratch(SCRATCH_BYTES)  # a busy connection: fewer, larger reads

    def _parse(self) -> None:
        """Cut complete frames out of the scratch buffer; start the frame that is not complete."""
        sv, pos, end = self._sv, self._start, self._end
        max_bytes = self.server.max_request_bytes
        memory = self.server.memory
        while end - pos >= 4:
            size = _SIZE.unpack_from(sv, pos)[0]
            if size < 0 or size > max_bytes:
                log.warning("closing %s: frame size %d outside 0..%d (socket.request.max.bytes)",
                            self.peer, size, max_bytes)
                self.close()
                return
            body = pos + 4
            if end - body >= size:
                if not memory.admits(self._held):
                    self._wait_for_memory()
                    break
                memory.take(size)
                self._held += size
                self._frames.append(bytearray(sv[body:body + size]))
                pos = body + size
                continue
            if 4 + size <= SCRATCH_BYTES:  # it fits in the scratch buffer: read there, taken when complete
                break
            if not self._start_frame(size, sv[body:end]):
                self._wait_for_memory()
                break
            pos = end
            break
        if pos == end:
            self._start = self._end = 0
        else:  # a partial size prefix, or a frame waiting for bytes or memory: move it to the front
            left = end - pos
            self._scratch[:left] = sv[pos:end]
            self._start, self._end = 0, left
            if left >= 4 and 4 + _SIZE.unpack_from(sv, 0)[0] > len(self._scratch):
                self._resize_scratch(SCRATCH_BYTES)
        if self._frames:
            self._frames_ready()

    def _start_frame(self, size: int, have: memoryview) -> bool:
        """Give an incomplete frame its own buffer, holding ``have``; False if the memory refuses it now.

        A frame up to SMALL_FRAME_BYTES is one bytearray and counts whole; a larger one is
        read into a mapping, counted by the bytes received (its pages are committed only as
        they arrive), so announcing a large frame and sending little costs little.
        """
        memory = self.server.memory
        if memory.admits_partial(self._held):
            reserved = 0
        elif memory.reserve(size, 0):
            reserved = size
        elif size <= SMALL_REQUEST_BYTES and memory.admits(self._held):
            memory.promote(0, size)
            reserved = size
            self._promoted = True
        else:
            return False
        if size <= SMALL_FRAME_BYTES:
            frame = bytearray(size)
            if not reserved:
                memory.take(size, partial=True)
            self._held += size
            self._partial = 0 if self._promoted else size
            self._frame_metered = False
        else:
            frame = self.server.buffers.get(size)
            self._held += reserved
            self._partial = 0 if self._promoted else reserved
            self._reserved = reserved
            self._frame_metered = True
        self._frame = frame
        self._fview = frame if type(frame) is memoryview else memoryview(frame)
        n = len(have)
        self._fview[:n] = have
        self._fill = n
        if self._frame_metered:
            self._count(n)
            if not self._may_read_frame():
                self._wait_for_memory()
        return True

    def _count(self, nbytes: int) -> None:
        """``nbytes`` of the metered frame arrived: out of its reservation, or taken now."""
        covered = min(nbytes, self._reserved)
        self._reserved -= covered
        extra = nbytes - covered
        if extra:
            self.server.memory.take(extra, partial=True)
            self._held += extra
            self._partial += extra

    def _may_read_frame(self) -> bool:
        """May the metered frame being read receive more (reserving the rest of it if need be)?"""
        memory = self.server.memory
        if self._reserved or memory.admits_partial(self._held):
            return True
        rest = len(self._frame) - self._fill
        if memory.reserve(rest, self._partial):
            self._reserved = rest
            self._held += rest
            self._partial += rest
            return True
        if len(self._frame) <= SMALL_REQUEST_BYTES and memory.admits(self._held - self._partial):
            memory.promote(self._partial, rest)  # the rest as a complete frame: its bytes leave the partial budget
            self._reserved = rest
            self._held += rest
            self._partial = 0
            self._promoted = True
            return True
        return False

    def _frame_done(self) -> None:
        self._frames.append(self._frame)
        self._frame = self._fview = None
        self._promoted = False
        partial, self._partial = self._partial, 0
        self.server.memory.completed(partial)
        self._frames_ready()

    def _resize_scratch(self, size: int) -> None:
        """A new scratch buffer of ``size`` bytes holding the unparsed bytes (at its front)."""
        left = self._end - self._start
        scratch = bytearray(size)
        scratch[:left] = self._sv[self._start:self._end]
        self._scratch, self._sv = scratch, memoryview(scratch)
        self._start, self._end = 0, left

    def shrink_if_quiet(self, now: float) -> None:
        """Go back to the small scratch buffer after SCRATCH_SHRINK_S without a byte (the sweep calls it)."""
        if (len(self._scratch) > SCRATCH_SMALL and self._end == self._start and self._frame is None
                and now - self._progress_at > SCRATCH_SHRINK_S):
            self._resize_scratch(SCRATCH_SMALL)

    def eof_received(self) -> bool:
        return False

    def _frames_ready(self) -> None:
        if len(self._frames) >= MAX_QUEUED_FRAMES:
            self.pause_for(PAUSE_FRAMES)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    # ------------------------------------------------------------ whether the connection reads
    def pause_for(self, reason: int) -> None:
        """Stop reading for ``reason`` (a PAUSE_* bit) until :meth:`resume_for` it."""
        if not self._pauses & reason:
            self._pauses |= reason
            self._update_reading()

    def resume_for(self, reason: int) -> None:
        if self._pauses & reason:
            self._pauses &= ~reason
            self._update_reading()

    def _update_reading(self) -> None:
        """The one place that tells the transport to read or not: it reads while no reason pauses it."""
        if self.closed:
            return
        paused = self._pauses != 0
        if paused != self._reading_paused:
            self._reading_paused = paused
            if paused:
                self.transport.pause_reading()
            else:
                self._progress_at = self.server.clock()  # time paused by us is not the client's stall
                self.transport.resume_reading()

    def read_stalled(self, now: float, timeout: float) -> bool:
        """Has a frame been started and received nothing for ``timeout`` seconds, by the client's doing?

        The clock stops while the connection is paused for its own queued frames (or any
        other reason but memory), and while it waits for memory holding none; a partial
        frame that holds request memory keeps its clock running even while it waits.
        """
        if self._frame is None and self._end == self._start:
            return False
        if self._pauses & ~PAUSE_MEMORY or (self._pauses & PAUSE_MEMORY and not self._partial):
            return False
        return now - self._progress_at > timeout

    def _wait_for_memory(self) -> None:
        if not self._pauses & PAUSE_MEMORY:
            self.server.memory.wait(self)
            self.pause_for(PAUSE_MEMORY)

    def memory_available(self) -> None:
        """Called by the request memory when bytes were given back: ask again."""
        self._pauses &= ~PAUSE_MEMORY
        if self.closed:
            return
        if self._frame is None:
            self._parse()  # frames that waited in the scratch buffer (may wait again)
        elif self._frame_metered and not self._may_read_frame():
            self._pauses |= PAUSE_MEMORY
            self.server.memory.wait(self)
        self._update_reading()

    def _release(self, nbytes: int) -> None:
        nbytes = min(nbytes, self._held)  # a request in hand when the connection closed was given back then
        if nbytes > 0:
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
        buffers = self.server.buffers
        for f in self._frames:
            if type(f) is memoryview:
                buffers.put(f)
        self._frames.clear()
        if type(self._frame) is memoryview:
            buffers.put(self._frame)
        self._frame = self._fview = None
        held, partial = self._held, self._partial
        self._held = self._partial = self._reserved = 0
        self.server.memory.give(held, partial)
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
        self.busy = True  # held, not idle (connections.max.idle.ms)
        self.pause_for(PAUSE_THROTTLE)
        try:
            await asyncio.sleep(delay)
        finally:
            self.busy = False
            self.resume_for(PAUSE_THROTTLE)
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
                if len(frames) < MAX_QUEUED_FRAMES // 2:
                    self.resume_for(PAUSE_FRAMES)
                tail = self._tail
                if tail is not None:  # answers held for an fsync: only Produce goes on meanwhile
                    if tail.done():
                        self._tail = None
                    elif frame[0] or frame[1]:  # not api key 0 (Produce): everything before it is answered first
                        await tail
                        self._tail = None
                self.busy = True
                try:
                    await self._process(frame)
                finally:
                    self.busy = False
                    self._release(len(frame))  # a frame holds its size once complete
                    if type(frame) is memoryview:
                        self.server.buffers.put(frame)
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

    async def _process(self, frame: bytearray | memoryview) -> None:
        """The request pipeline: decode -> authenticate -> authorize -> time and count -> handler."""
        if self._pauses & PAUSE_CLOSING:  # a failed login was answered: nothing more is
            return
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
        except (DecodeError, ValueError, IndexError, struct.error) as e:
            raise _malformed(api_key, version, e) from None
        server = self.server
        if not self.authenticator.admits(self, api_key):
            raise ProtocolViolation(f"{ApiKey(api_key).name} before authentication (or after the session expired)")
        metrics = server.metrics
        quotas = server.quotas
        if h.fast is not None:
            b = self._response_head(correlation_id, flexible)
            t0 = time.perf_counter()
            try:
                throttle_at = h.fast(self.components, m, pos, version, b)
            except BaseException:
                metrics.failed(api_key)
                raise
            if type(throttle_at) is Deferred:
                metrics.observe(api_key, time.perf_counter() - t0)
                deferred = throttle_at
                client_id, size = header.client_id, len(frame)

                def send_fast(exc) -> None:
                    at = deferred.finish(exc)
                    if quotas.active:
                        t1 = time.perf_counter()
                        ms = quotas.finish_fast(self, api_key, client_id, size, t1 - t0, t1)
                        if ms:
                            _THROTTLE.pack_into(b, at, ms)
                    self._write_response(b)
                self._defer(deferred.wait, send_fast)
                if quotas.active:  # the throttle is known once answered: the next request waits for it
                    await self._answered()
                return
            if throttle_at:
                t1 = time.perf_counter()
                elapsed = t1 - t0
                metrics.observe(api_key, elapsed)
                if quotas.active:  # counted in one call (a fast path never waits)
                    ms = quotas.finish_fast(self, api_key, header.client_id, len(frame), elapsed, t1)
                    if ms:
                        _THROTTLE.pack_into(b, throttle_at, ms)
                if not self.closed:
                    self._send_in_order(lambda _exc: self._write_response(b))
                return
        if self._tail is not None:  # a Produce the fast path left: after those held for their fsync
            await self._tail
            self._tail = None
        q = quotas.start(self, api_key, self.principal, header.client_id, len(frame)) if quotas.active else None
        try:
            req, end = cls.decode_from(m, pos, version)
        except (DecodeError, ValueError, IndexError, struct.error) as e:
            raise _malformed(api_key, version, e) from None
        ctx = RequestContext(self.components, self, api_key, version, correlation_id, header.client_id,
                             self.principal, self.listener, self.host)
        if h.acl and not server.authorizer.authorize(ctx, h.acl):
            raise ProtocolViolation(f"{ctx.principal} is not authorized for {ApiKey(api_key).name}")
        ctx.quota = q
        t0 = time.perf_counter()
        try:
            resp = await (h.fn(ctx, req) if q is None else q.timed(h.fn(ctx, req)))
        except BaseException:
            metrics.failed(api_key)
            raise
        finally:
            metrics.observe(api_key, time.perf_counter() - t0)
        if type(resp) is Deferred:
            deferred = resp

            def send(exc) -> None:
                full = deferred.finish(exc)
                if q is not None:
                    q.finish(full)
                self.send_response(ctx, full, flexible)
            self._defer(deferred.wait, send)
            if q is not None:
                await self._answered()
            return
        if q is not None:
            q.finish(resp)  # throttle_time_ms into the response; this connection muted (KIP-219)
        if resp is None or self.closed:
            return
        self.send_response(ctx, resp, flexible)
        if self.close_after_response:
            self._close_after_failed_login()

    def _defer(self, wait, send) -> None:
        """Call ``send(exc)`` once ``wait`` is done (``exc``: what it raised, or None) and every answer
        deferred before has been sent (``dispatch.Deferred``); a closed connection sends nothing."""
        prev = self._tail

        async def run() -> None:
            exc = None
            try:
                await wait
            except Exception as e:  # noqa: BLE001 -- the answer says it (KAFKA_STORAGE_ERROR)
                exc = e
            if prev is not None:
                await prev
            if self.closed:
                return
            try:
                send(exc)
            except Exception:
                log.exception("closing %s after an internal error", self.peer)
                self.close()

        self._tail = asyncio.get_running_loop().create_task(run())

    async def _answered(self) -> None:
        """Wait until every deferred answer has gone out."""
        tail = self._tail
        if tail is not None:
            await tail
            if self._tail is tail:
                self._tail = None

    def _send_in_order(self, send) -> None:
        """``send(None)`` now, or after the answers still held for their fsync."""
        tail = self._tail
        if tail is None or tail.done():
            send(None)
        else:
            self._defer(tail, send)

    def _close_after_failed_login(self) -> None:
        """Kafka's ``connection.failed.authentication.delay.ms`` (Selector's delayed close): the
        connection reads nothing more and closes after the delay, so a client sees the answer
        before the close (kafka-python drops data that arrives with the end of the stream)."""
        delay = self.server.failed_auth_delay_ms
        if delay <= 0:
            self.close_after_flush()
            return
        self.pause_for(PAUSE_CLOSING)  # and _process answers no frame already queued
        asyncio.get_running_loop().call_later(delay / 1000.0, self.close_after_flush)

    def _raw_sasl_token(self, frame: bytearray) -> None:
        """One token of the legacy (handshake v0) exchange: answer it raw, or close on failure."""
        ok, out = self.authenticator.raw_token(self, bytes(frame))
        if not ok:
            raise ProtocolViolation("SASL authentication failed")
        if out is not None:  # no frame for a null answer (Kafka's SaslServerAuthenticator)
            self.transport.write(_SIZE.pack(len(out)) + out)

    @staticmethod
    def _response_head(correlation_id: int, flexible: bool) -> bytearray:
        """A response's size placeholder and header (v1, with tagged fields, for flexible versions)."""
        b = bytearray(8)
        _CORR.pack_into(b, 0, 0, correlation_id)
        if flexible:
            b.append(0)
        return b

    def _write_response(self, b: bytearray) -> None:
        """Send a response held whole in ``b`` (size placeholder first)."""
        _SIZE.pack_into(b, 0, len(b) - 4)
        self.last_active = self.server.clock()
        self.transport.write(b)

    def send_response(self, ctx: RequestContext, resp, flexible: bool) -> None:
        # The ApiVersions response header is always v0 (no tagged fields), whatever the version.
        b = self._response_head(ctx.correlation_id, flexible and ctx.api_key != ApiKey.API_VERSIONS)
        sp: list = []
        resp.encode_into(b, ctx.api_version, sp)
        if not sp:
            self._write_response(b)
            return
        _SIZE.pack_into(b, 0, len(b) - 4 + sum(len(c) for _, c in sp))
        self.last_active = self.server.clock()
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
            if sent < part.size:  # zeros for bytes a file cut under us lost keep the frame whole
                try:
                    data = os.pread(part.fd, part.size - sent, part.pos + sent)
                except OSError:  # a failing disk (EIO) since the batch was located: the client's CRC check
                    data = b""  # refuses these zeros, it fetches again and is told KAFKA_STORAGE_ERROR
                pending.append(data.ljust(part.size - sent, b"\0"))
        if pending:
            t.writelines(pending)

    def _send_unsupported_api_versions(self, correlation_id: int) -> None:
        """KIP-511: a v0 answer carrying only ApiVersions' own range, the one the client retries within
        (ApiVersionsRequest.getErrorResponse)."""
        resp = ApiVersionsResponse(error_code=Errors.UNSUPPORTED_VERSION,
                                   api_keys=[e for e in api_version_entries() if e.api_key == ApiKey.API_VERSIONS])
        b = self._response_head(correlation_id, False)
        resp.encode_into(b, 0)
        self._write_response(b)


def _malformed(api_key: int, version: int, e: Exception) -> ProtocolViolation:
    return ProtocolViolation(f"malformed {ApiKey(api_key).name} v{version} request: {e}")


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
        self.read_timeout_ms = cfg.get_int("sharebroker.request.read.timeout.ms", DEFAULT_READ_TIMEOUT_MS)
        self.failed_auth_delay_ms = cfg.get_int("connection.failed.authentication.delay.ms", 100)
        queued = cfg.get_int("queued.max.request.bytes", -1)
        self.memory = RequestMemory(queued if queued > 0 else max(DEFAULT_REQUEST_MEMORY, self.max_request_bytes))
        self.buffers = FrameBuffers()
        # what the last sweep saw, to give memory back once load has gone (_give_back_memory)
        self._released_at_trim = -TRIM_AFTER_BYTES  # start-up freed memory too: the first sweep trims
        self._closed_since_trim = 0
        self._buffers_seen = 0
        self.authenticator = components.authenticator
        self.authorizer = components.authorizer
        self.metrics = components.request_metrics
        self.quotas = components.quotas
        self.per_ip: collections.Counter = collections.Counter()
        self.clock = time.monotonic
        self._acceptors: list[Acceptor] = []
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
            self._closed_since_trim += 1
            self.per_ip[conn.host] -= 1
            if self.per_ip[conn.host] <= 0:
                del self.per_ip[conn.host]

    def _sweep(self) -> None:
        """Close idle and stalled connections, shrink quiet ones' buffers, give memory back."""
        now = self.clock()
        idle_deadline = now - self.idle_ms / 1000.0 if self.idle_ms >= 0 else None
        read_timeout = self.read_timeout_ms / 1000.0
        for conn in list(self.connections):
            if conn.read_stalled(now, read_timeout):
                log.info("closing %s: a request received no byte for %d ms (sharebroker.request.read.timeout.ms)",
                         conn.peer, self.read_timeout_ms)
                conn.close()
            elif idle_deadline is not None and not conn.busy and conn.last_active < idle_deadline:
                log.info("closing %s: idle for more than %d ms (connections.max.idle.ms)", conn.peer, self.idle_ms)
                conn.close()
            else:
                conn.shrink_if_quiet(now)
        self._give_back_memory()
        self._schedule_sweep()

    def _give_back_memory(self) -> None:
        """Once load has gone: unmap the kept frame buffers (no large frame since the last sweep) and
        trim the heap (enough request bytes freed or connections closed since the last trim)."""
        buffers = self.buffers
        if buffers.handed_out == self._buffers_seen and buffers.kept:
            buffers.trim()
        self._buffers_seen = buffers.handed_out
        released = self.memory.released
        if released - self._released_at_trim >= TRIM_AFTER_BYTES or self._closed_since_trim >= TRIM_AFTER_CLOSES:
            self._released_at_trim = released
            self._closed_since_trim = 0
            # On the log's worker thread: malloc_trim walks the whole heap (milliseconds with a large
            # one) and ctypes releases the GIL around it, so the loop goes on meanwhile.
            self.components.logs.background.submit(trim_heap)

    def _schedule_sweep(self) -> None:
        interval = min(30.0, max(self.read_timeout_ms / 4000.0, 0.05))
        if self.idle_ms >= 0:
            interval = min(interval, max(self.idle_ms / 4000.0, 0.05))
        self._idle_sweep = asyncio.get_running_loop().call_later(interval, self._sweep)

    async def start(self) -> None:
        """Bind every listener (raises OSError naming the address that failed) and start accepting
        (``broker/acceptor.py``: our own accept loop, which survives the open-file limit)."""
        for lst in self.listeners:
            try:
                socks = listening_sockets(lst.host, lst.port)
            except OSError as e:
                await self.close()
                raise OSError(e.errno, f"listener {lst.name} {lst.host}:{lst.port}: {e.strerror or e}") from None
            for sock in socks:
                acceptor = Acceptor(sock, lambda lst=lst: Connection(self, lst), lst.ssl_context, lst.name)
                self._acceptors.append(acceptor)
                acceptor.start()
            lst.bound(self._acceptors[-1].port)
        self.port = self.listeners[0].port
        self._schedule_sweep()

    async def close(self) -> None:
        if self._idle_sweep is not None:
            self._idle_sweep.cancel()
        for acceptor in self._acceptors:
            acceptor.close()
        for c in list(self.connections):
            c.close()
        self._acceptors = []


def parse_per_ip_overrides(value: str | None) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs, comma-separated."""
    out: dict[str, int] = {}
    for item in (value or "").split(","):
        item = item.strip()
        if item:
            host, _, count = item.rpartition(":")
            out[host.strip()] = int(count)
    return out
