"""Connection framing: every frame arrives whole, in order, in a writable buffer of its own,
whatever the read boundaries; oversized and negative sizes close the connection."""
from __future__ import annotations

import random
import struct

import pytest

from broker.pipeline import AllowAll, NoAuthentication, RequestMetrics
from broker.server import METERED_READ, SCRATCH_BYTES, SMALL_FRAME_BYTES, Connection, RequestMemory


class FakeTransport:
    def __init__(self):
        self.aborted = False
        self.paused = False

    def abort(self):
        self.aborted = True

    def pause_reading(self):
        self.paused = True

    def resume_reading(self):
        self.paused = False


class FakeServer:
    def __init__(self, max_request_bytes=1 << 20, memory=1 << 30):
        self.components = None
        self.max_request_bytes = max_request_bytes
        self.memory = RequestMemory(memory)
        self.clock = lambda: 0.0
        self.authenticator = NoAuthentication()
        self.authorizer = AllowAll()
        self.metrics = RequestMetrics()
        self.connections = set()


def connection(max_request_bytes=1 << 20, memory=1 << 30) -> Connection:
    c = Connection(FakeServer(max_request_bytes, memory))
    c.transport = FakeTransport()
    return c


def feed(conn: Connection, data: bytes, chunk_sizes) -> None:
    """Deliver ``data`` the way a transport does: into get_buffer(), then buffer_updated()."""
    pos = 0
    sizes = iter(chunk_sizes)
    while pos < len(data) and not conn.closed:
        want = next(sizes, None)
        if want is None:
            return
        buf = conn.get_buffer(-1)
        n = min(want, len(buf), len(data) - pos)
        assert n > 0, "get_buffer returned an empty buffer"
        buf[:n] = data[pos:pos + n]
        conn.buffer_updated(n)
        pos += n


def frames_of(bodies) -> bytes:
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies)


@pytest.mark.parametrize("seed", range(20))
def test_frames_survive_any_read_boundaries(seed):
    rnd = random.Random(seed)
    sizes = [0, 1, 7, 8, 100, SCRATCH_BYTES - 4, SCRATCH_BYTES, SCRATCH_BYTES + 3, 200_000]
    bodies = [bytes(rnd.getrandbits(8) for _ in range(rnd.choice(sizes) if i % 3 else rnd.randint(8, 64)))
              for i in range(30)]
    conn = connection()
    data = frames_of(bodies)
    feed(conn, data, iter(lambda: rnd.choice([1, 2, 3, 5, 4096, 65536, 1 << 20]), None))
    got = list(conn._frames)
    assert [bytes(f) for f in got] == bodies
    assert not any(memoryview(f).readonly for f in got)  # the log rewrites offsets in place
    assert conn._start == conn._end == 0 and conn._frame is None


def test_large_frame_is_read_into_its_own_buffer_directly():
    conn = connection(max_request_bytes=1 << 30)
    body = bytes(range(256)) * (SMALL_FRAME_BYTES // 256 + 1000)
    data = frames_of([body])
    feed(conn, data, [10])  # size prefix + 6 bytes: the frame now has its own buffer
    own = conn._frame
    assert own is not None and len(own) == len(body)
    view = conn.get_buffer(-1)
    assert view.obj is own  # the transport reads straight into the frame's own buffer,
    assert len(view) == METERED_READ  # at most this much at a time (the request memory meters it)
    feed(conn, data[10:], iter(lambda: 1 << 16, None))
    assert len(conn._frames) == 1
    assert conn._frames[0] is own and bytes(own) == body
    assert conn.server.memory.used == len(body)  # held until the request has been handled


def test_request_memory_pauses_reading_and_resumes():
    conn = connection(memory=100)
    small = [b"a" * 60, b"b" * 60, b"c" * 10]
    feed(conn, frames_of(small), [1 << 16])
    # 60 fits, 60 more may still be taken while memory is left (non-strict, as Kafka's pool)...
    assert [bytes(f) for f in conn._frames] == small[:2]
    # ...then none is left: the third frame waits in the scratch buffer and reading stops.
    assert conn.transport.paused and conn.server.memory.used == 120
    conn.server.memory.give(60)  # the first request was handled
    assert not conn.transport.paused
    assert [bytes(f) for f in conn._frames] == small
    assert conn.server.memory.used == 70


def test_large_frame_is_metered_by_bytes_received():
    conn = connection(max_request_bytes=1 << 30, memory=1 << 30)
    size = 10 * SMALL_FRAME_BYTES
    feed(conn, struct.pack(">i", size) + b"x" * 1000, [1004])
    assert conn._frame is not None and conn.server.memory.used == 1000


@pytest.mark.parametrize("size", [-1, (1 << 20) + 1])
def test_bad_sizes_close_the_connection(size):
    conn = connection(max_request_bytes=1 << 20)
    feed(conn, struct.pack(">i", size) + b"xxxx", [8])
    assert conn.transport.aborted and conn.closed
    assert not conn._frames
