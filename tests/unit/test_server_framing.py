"""Connection framing: every frame arrives whole, in order, in a writable buffer of its own,
whatever the read boundaries; oversized and negative sizes close the connection.  The request
memory decides, before every read, whether a connection reads: partial frames count only what
arrived, a quarter of the pool stays for complete requests, one connection holds at most a share
before it must reserve the rest of its frame; a started frame that stalls is found by the sweep."""
from __future__ import annotations

import random
import struct

import pytest

from broker.pipeline import AllowAll, NoAuthentication, RequestMetrics
from broker.request_memory import POOLED_FRAME_BYTES, FrameBuffers
from broker.server import (METERED_READ, PAUSE_FRAMES, PAUSE_MEMORY, SCRATCH_BYTES, SCRATCH_SMALL, SMALL_FRAME_BYTES,
                           Connection, RequestMemory)


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
        self.buffers = FrameBuffers()
        self.now = 0.0
        self.clock = lambda: self.now
        self.authenticator = NoAuthentication()
        self.authorizer = AllowAll()
        self.metrics = RequestMetrics()
        self.connections = set()

    def forget(self, conn):
        self.connections.discard(conn)


def connection(max_request_bytes=1 << 20, memory=1 << 30, server=None) -> Connection:
    c = Connection(server or FakeServer(max_request_bytes, memory))
    c.transport = FakeTransport()
    return c


def handled(conn: Connection) -> bytes:
    """The oldest queued frame is handled: its memory is given back, as Connection._run does."""
    frame = conn._frames.popleft()
    data = bytes(frame)
    conn._release(len(frame))
    if type(frame) is memoryview:
        conn.server.buffers.put(frame)
    return data


def feed(conn: Connection, data: bytes, chunk_sizes) -> None:
    """Deliver ``data`` the way a transport does: into get_buffer(), then buffer_updated(), while reading."""
    pos = 0
    sizes = iter(chunk_sizes)
    while pos < len(data) and not conn.closed and not conn.transport.paused:
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
    assert view.obj is own.obj  # the transport reads straight into the frame's own buffer,
    assert len(view) == METERED_READ  # at most this much at a time (the request memory meters it)
    feed(conn, data[10:], iter(lambda: 1 << 16, None))
    assert len(conn._frames) == 1
    assert conn._frames[0] is own and bytes(own) == body
    memory = conn.server.memory
    assert memory.used == len(body) and memory.partial == 0  # held, complete, until handled
    handled(conn)
    assert memory.used == 0 and conn._held == 0


def test_partial_frames_count_only_bytes_received():
    conn = connection(max_request_bytes=1 << 30, memory=1 << 30)
    size = 10 * SMALL_FRAME_BYTES
    feed(conn, struct.pack(">i", size) + b"x" * 1000, [1004])
    memory = conn.server.memory
    assert conn._frame is not None and memory.used == memory.partial == 1000
    feed(conn, b"y" * 5000, [5000])
    assert memory.used == memory.partial == 6000


def test_a_connection_at_its_share_waits_for_its_own_requests():
    conn = connection(memory=400)  # share: a quarter of the partial budget (300) = 75
    small = [b"a" * 80, b"b" * 80, b"c" * 10]
    feed(conn, frames_of(small), [1 << 12])
    memory = conn.server.memory
    # 80 is taken below the share; then the connection holds more than its share: it waits.
    assert [bytes(f) for f in conn._frames] == small[:1]
    assert conn.transport.paused and memory.used == 80
    assert handled(conn) == small[0]  # its request was handled: the next one is taken, then it waits again
    assert [bytes(f) for f in conn._frames] == small[1:2] and conn.transport.paused
    assert handled(conn) == small[1]
    assert [bytes(f) for f in conn._frames] == small[2:] and not conn.transport.paused
    assert memory.used == 10


def test_small_complete_requests_are_served_while_partial_frames_fill_their_budget():
    cap = 64 * SMALL_FRAME_BYTES
    server = FakeServer(max_request_bytes=1 << 30, memory=cap)
    memory = server.memory
    big = 100 * SMALL_FRAME_BYTES
    attackers = []
    while memory.partial < memory.partial_capacity:  # each sends less than its share of a big frame
        a = connection(server=server)
        feed(a, struct.pack(">i", big) + b"\0" * (memory.share - 2 * METERED_READ), iter(lambda: METERED_READ, None))
        attackers.append(a)
    late = connection(server=server)
    feed(late, struct.pack(">i", big) + b"\0" * 4096, [4100])
    assert late.transport.paused and late._frame is None  # no room for another partial frame
    client = connection(server=server)
    requests = [bytes([i]) * 100 for i in range(10)]
    feed(client, frames_of(requests), [1 << 12])
    assert [bytes(f) for f in client._frames] == requests and not client.transport.paused
    assert memory.used < cap
    attackers[0].connection_lost(None)  # a stalled attacker is closed: the late frame starts
    assert not late.transport.paused and late._frame is not None


def test_partial_frames_reading_at_once_stay_within_their_budget():
    """Issue 29 item 5: many partial frames reading in turn (each read was admitted while room was
    left) do not overshoot the partial budget, and complete requests and new connections are served."""
    cap = 10_000_000
    server = FakeServer(max_request_bytes=1 << 30, memory=cap)
    memory = server.memory
    attackers = [connection(server=server) for _ in range(50)]
    sent = dict.fromkeys(attackers, 0)
    for a in attackers:  # each announces 100 MB
        feed(a, struct.pack(">i", 100_000_000), [4])
    for _ in range(8):  # rounds of one read each, as an event loop serves ready sockets in turn
        for a in attackers:
            if a.transport.paused or sent[a] >= 1 << 20:
                continue
            buf = a.get_buffer(-1)
            n = min(len(buf), METERED_READ, (1 << 20) - sent[a])
            assert n > 0
            a.buffer_updated(n)
            sent[a] += n
            assert memory.partial <= memory.partial_capacity + len(attackers)  # a byte past it at most, each
    assert memory.partial >= memory.partial_capacity - METERED_READ  # the attack filled the budget
    assert any(a.transport.paused for a in attackers)
    client = connection(server=server)  # a new connection: its first requests are complete frames
    requests = [bytes([i]) * 3000 for i in range(20)]
    feed(client, frames_of(requests), iter(lambda: 1000, None))  # in pieces: each fits the scratch buffer
    assert [bytes(f) for f in client._frames] == requests and not client.transport.paused


def test_a_frame_past_the_pool_leaves_room_for_complete_requests():
    """A lone frame larger than the pool reserves the rest of itself (it may complete alone), yet
    complete requests are still taken: partial frames count against them only up to their budget."""
    server = FakeServer(max_request_bytes=1 << 30, memory=16 * SMALL_FRAME_BYTES)
    memory = server.memory
    big = connection(server=server)
    feed(big, struct.pack(">i", 64 * SMALL_FRAME_BYTES) + b"\0" * (memory.share + 1), iter(lambda: METERED_READ, None))
    assert big._reserved > 0 and memory.used > memory.capacity
    client = connection(server=server)
    requests = [bytes([i]) * 1000 for i in range(10)]
    feed(client, frames_of(requests), iter(lambda: 1 << 12, None))
    assert [bytes(f) for f in client._frames] == requests and not client.transport.paused


def test_a_frame_past_its_share_reserves_the_rest_when_it_fits():
    server = FakeServer(max_request_bytes=1 << 30, memory=32 * SMALL_FRAME_BYTES)
    memory = server.memory
    size = memory.share * 2  # more than one connection's share, less than the partial budget
    conn = connection(server=server)
    body = bytes(range(256)) * (size // 256)
    feed(conn, frames_of([body]), iter(lambda: METERED_READ, None))
    assert [bytes(f) for f in conn._frames] == [body]  # it never waited: the rest was reserved
    assert memory.used == size and memory.partial == 0


def test_a_frame_larger_than_the_pool_completes_alone():
    server = FakeServer(max_request_bytes=1 << 30, memory=4 * SMALL_FRAME_BYTES)
    conn = connection(server=server)
    body = b"z" * (16 * SMALL_FRAME_BYTES)
    feed(conn, frames_of([body]), iter(lambda: METERED_READ, None))
    assert [bytes(f) for f in conn._frames] == [body]


def test_a_frame_past_its_share_waits_while_the_rest_does_not_fit():
    server = FakeServer(max_request_bytes=1 << 30, memory=32 * SMALL_FRAME_BYTES)
    memory = server.memory
    other = connection(server=server)
    feed(other, struct.pack(">i", 10 * memory.share) + b"\0" * (memory.share // 2),
         iter(lambda: METERED_READ, None))
    conn = connection(server=server)
    size = memory.partial_capacity  # its rest cannot fit beside the other partial frame
    feed(conn, struct.pack(">i", size) + b"\1" * size, iter(lambda: METERED_READ, None))
    assert conn.transport.paused and conn._frame is not None and conn._held >= memory.share
    assert not conn._frames
    other.connection_lost(None)  # the other frame's bytes are given back: the rest is reserved now
    assert not conn.transport.paused and conn._reserved > 0


def test_read_clock_runs_only_while_the_client_is_the_one_stalling():
    server = FakeServer(max_request_bytes=1 << 30)
    conn = connection(server=server)
    assert not conn.read_stalled(100.0, 1.0)  # nothing started
    feed(conn, struct.pack(">i", 10 * SMALL_FRAME_BYTES) + b"x" * 100, [104])
    assert not conn.read_stalled(0.5, 1.0)
    assert conn.read_stalled(1.5, 1.0)
    conn.pause_for(PAUSE_FRAMES)  # paused by us for its own queued frames: not the client's stall
    assert not conn.read_stalled(5.0, 1.0)
    server.now = 5.0
    conn.resume_for(PAUSE_FRAMES)  # resuming restarts the clock
    assert not conn.read_stalled(5.5, 1.0) and conn.read_stalled(6.5, 1.0)
    server.now = 7.0
    feed(conn, b"x" * 10, [10])  # a byte is progress
    assert not conn.read_stalled(7.5, 1.0)
    prefix = connection(server=server)
    feed(prefix, b"\0\0", [2])  # half a size prefix is a started frame too
    assert prefix.read_stalled(8.5, 1.0)


def test_waiting_for_memory_with_nothing_held_stops_the_clock():
    conn = connection(memory=100)
    conn._held = conn.server.memory.share  # as if its earlier requests were still being handled
    feed(conn, frames_of([b"q" * 10]), [14])
    assert conn._pauses == PAUSE_MEMORY and not conn._partial
    assert not conn.read_stalled(100.0, 1.0)


def test_one_place_decides_reading():
    conn = connection()
    conn.pause_for(PAUSE_FRAMES)
    conn.pause_for(PAUSE_MEMORY)
    conn.resume_for(PAUSE_FRAMES)
    assert conn.transport.paused  # still paused for memory
    conn.resume_for(PAUSE_MEMORY)
    assert not conn.transport.paused


def test_scratch_grows_when_busy_and_shrinks_when_quiet():
    server = FakeServer()
    conn = connection(server=server)
    assert len(conn._scratch) == SCRATCH_SMALL
    bodies = [b"r" * 100] * 50  # more than the small scratch buffer holds
    feed(conn, frames_of(bodies), iter(lambda: 1 << 16, None))
    assert len(conn._scratch) == SCRATCH_BYTES and len(conn._frames) == 50
    conn.shrink_if_quiet(1.0)
    assert len(conn._scratch) == SCRATCH_BYTES  # not quiet long enough
    conn.shrink_if_quiet(100.0)
    assert len(conn._scratch) == SCRATCH_SMALL


def test_frame_buffers_are_reused_only_when_nothing_refers_to_them():
    buffers = FrameBuffers(keep=4 * POOLED_FRAME_BYTES)
    v = buffers.get(300_000)
    assert len(v) == 300_000 and not v.readonly
    mm = v.obj
    buffers.put(v)
    assert buffers.kept == len(mm)
    w = buffers.get(400_000)  # same size class: the same mapping, warm
    assert w.obj is mm and buffers.kept == 0
    kept_slice = w[10:20]  # a handler kept a slice: the mapping must not be handed out again
    buffers.put(w)
    assert buffers.kept == 0 and buffers.get(400_000).obj is not mm
    del kept_slice
    huge = buffers.get(POOLED_FRAME_BYTES + 1)  # too large to keep
    huge_mm = huge.obj
    buffers.put(huge)
    assert buffers.kept == 0 and huge_mm.closed
    buffers.put(buffers.get(300_000))
    assert buffers.trim() > 0 and buffers.kept == 0


@pytest.mark.parametrize("size", [-1, (1 << 20) + 1])
def test_bad_sizes_close_the_connection(size):
    conn = connection(max_request_bytes=1 << 20)
    feed(conn, struct.pack(">i", size) + b"xxxx", [8])
    assert conn.transport.aborted and conn.closed
    assert not conn._frames
