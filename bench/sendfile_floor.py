"""The floor under a broker's consume cost: plain-Python ``sendfile`` servers on loopback.

``raw`` (the default): a child process serves one connection: for each 4-byte request (how many bytes) it sends a
60-byte header and then that many bytes of ``--file`` with one ``os.sendfile`` call (from
the page cache, as a broker's Fetch does), wrapping at the end of the file.  The parent is
the client: it asks for ``--chunk`` bytes (1 MiB: librdkafka's ``max.partition.fetch.bytes``),
reads the answer into one reused buffer, and asks again until ``--mb`` MB went by.  There is
no protocol work at all, so what the server spends is what the kernel charges for sending
the bytes: no broker sending the same bytes over the same socket can spend less.

On loopback the receive side's work (the TCP receive path, waking the reader) runs in the
softirq of whichever context gets to it: the sender's ``sendfile``, the reader's ``recv``
(its socket is busy) or ``ksoftirqd``.  So the server's own figure moves between runs (it
is bimodal on a loaded 2-core machine); the client's system time and ksoftirqd's are
printed beside it so the total can be compared.

``kafka`` (:func:`start_kafka`, used by ``bench/cpu_per_mb.py --floor``): a child process
that answers just enough of the Kafka protocol (ApiVersions, Metadata, ListOffsets, Fetch
v4-11; FindCoordinator with COORDINATOR_NOT_AVAILABLE) for a consumer in assign mode to read
one partition whose log is a segment file of ours, one thread per connection, blocking
sockets; a Fetch answers the batches from the fetch offset up to PartitionMaxBytes with one
``sendfile`` of their byte range, the response corked (``TCP_CORK``) around it.  Its CPU is
what sending those bytes to that very client costs with next to no broker work around it:
the loopback receive work the client leaves to the sender depends on how the client reads
(librdkafka polls, then reads), which the raw floor's tight ``recv`` loop does not show.

    python bench/sendfile_floor.py --mb 400 --repeat 5
    python bench/sendfile_floor.py --file /path/to/00000000000000000000.log
    python bench/sendfile_floor.py --kafka /path/to/00000000000000000000.log --topic T   # until Ctrl-C
"""

from __future__ import annotations

import argparse
import bisect
import multiprocessing as mp
import os
import resource
import signal
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time

try:
    from . import _common as C  # type: ignore[import-not-found]
except ImportError:  # run as a script
    import _common as C  # type: ignore[no-redef]

HEADER = 60
_REQ = struct.Struct(">i")


def softirq_cpu() -> float:
    """CPU seconds of the ksoftirqd threads so far."""
    tck = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read().decode("ascii", "replace")
        except OSError:
            continue
        if "(ksoftirqd/" in raw:
            fields = raw[raw.rindex(")") + 2:].split()
            total += int(fields[11]) + int(fields[12])
    return total / tck


def _serve(path: str, listener: socket.socket, out) -> None:
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio / uvloop transports
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    pos = 0
    head = bytes(HEADER)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    while True:
        req = conn.recv(4)
        if len(req) < 4 or not (n := _REQ.unpack(req)[0]):
            break
        n = min(n, size)
        if pos + n > size:
            pos = 0
        conn.sendall(head)
        sent = 0
        while sent < n:
            sent += os.sendfile(conn.fileno(), fd, pos + sent, n - sent)
        pos += n
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out.send((r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime))
    conn.close()
    os.close(fd)


def run(path: str, total_bytes: int, chunk: int = 1024 * 1024) -> dict:
    """Send ``total_bytes`` of ``path`` in ``chunk``-byte answers; ms per MB (10^6 bytes) of each party."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    chunk = min(chunk, os.path.getsize(path))
    recv_end, send_end = mp.Pipe(duplex=False)
    ctx = mp.get_context("fork")
    p = ctx.Process(target=_serve, args=(path, listener, send_end))
    p.start()
    s = socket.create_connection(listener.getsockname())
    buf = memoryview(bytearray(chunk + HEADER))
    need = chunk + HEADER
    req = _REQ.pack(chunk)
    t0, k0 = os.times(), softirq_cpu()
    done = 0
    while done < total_bytes:
        s.sendall(req)
        got = 0
        while got < need:
            n = s.recv_into(buf[got:need])
            if not n:
                raise RuntimeError("floor server went away")
            got += n
        done += chunk
    t1, k1 = os.times(), softirq_cpu()
    s.sendall(_REQ.pack(0))
    user, sys_ = recv_end.recv()
    p.join(30)
    s.close()
    listener.close()
    mb = done / 1e6
    return {"server": 1000 * (user + sys_) / mb, "server_user": 1000 * user / mb, "server_sys": 1000 * sys_ / mb,
            "client_sys": 1000 * (t1.system - t0.system) / mb, "ksoftirqd": 1000 * (k1 - k0) / mb}


# --------------------------------------------------------------------------- the Kafka-speaking floor

_BATCH_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta, at byte 23 of a batch
_KAFKA_HEAD = struct.Struct(">hhi")
_SERVED = {18: (0, 3), 3: (1, 8), 2: (1, 5), 1: (4, 11), 10: (0, 2), 0: (3, 3)}  # api key -> versions (Produce
# is advertised, never served: librdkafka enables the v2 record format only with Produce v3 and Fetch v4)


def _batches(fd: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """(base offsets, last offsets, positions, sizes) of the record batches in a segment file."""
    bases, lasts, poss, sizes = [], [], [], []
    pos, end = 0, os.fstat(fd).st_size
    while pos + 61 <= end:
        head = os.pread(fd, 27, pos)
        base, length = _BATCH_HEAD.unpack_from(head, 0)
        bases.append(base)
        lasts.append(base + _LAST_DELTA.unpack_from(head, 23)[0])
        poss.append(pos)
        sizes.append(length + 12)
        pos += length + 12
    return bases, lasts, poss, sizes


class _KafkaFloor:
    """Serves ``topic``-0 from one segment file (see the module docstring); runs in its own process."""

    def __init__(self, path: str, topic: str, listener: socket.socket):
        from protocol.messages import registry

        self.registry = registry
        self.fd = os.open(path, os.O_RDONLY)
        self.bases, self.lasts, self.poss, self.sizes = _batches(self.fd)
        self.topic = topic
        self.listener = listener
        self.port = listener.getsockname()[1]

    def run(self) -> None:
        while True:
            conn, _ = self.listener.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        from protocol.messages.request_header import RequestHeader

        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                size = _recv_exact(conn, 4)
                if size is None:
                    return
                body = _recv_exact(conn, _REQ.unpack(size)[0])
                if body is None:
                    return
                api_key, version, corr = _KAFKA_HEAD.unpack_from(body, 0)
                req_cls = self.registry.REQUESTS[api_key]
                flexible = req_cls.FLEXIBLE_VERSION is not None and version >= req_cls.FLEXIBLE_VERSION
                _, pos = RequestHeader.decode_from(memoryview(body), 0, 2 if flexible else 1)
                lo, hi = _SERVED.get(api_key, (0, -1))
                if api_key == 18 and version > hi:
                    version = 0  # KIP-511: a v0 answer with UNSUPPORTED_VERSION and our ranges
                    resp = self._api_versions(35)
                elif not lo <= version <= hi:
                    return
                else:
                    req, _ = req_cls.decode_from(memoryview(body), pos, version)
                    resp = getattr(self, f"_k{api_key}")(req)
                self._send(conn, corr, resp, version, flexible and api_key != 18)
        except OSError:
            return
        finally:
            conn.close()

    def _send(self, conn: socket.socket, corr: int, resp, version: int, flexible: bool) -> None:
        from protocol.primitives import FileChunk, frame_parts

        b = bytearray(8)
        struct.pack_into(">i", b, 4, corr)
        if flexible:
            b.append(0)
        sp: list = []
        resp.encode_into(b, version, sp)
        struct.pack_into(">i", b, 0, len(b) - 4 + sum(len(c) for _, c in sp))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        for part in frame_parts(b, sp):
            if type(part) is FileChunk:
                sent = 0
                while sent < part.size:
                    sent += os.sendfile(conn.fileno(), part.fd, part.pos + sent, part.size - sent)
            else:
                conn.sendall(part)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)

    def _api_versions(self, error: int = 0):
        r = self.registry.RESPONSES[18]
        return r(error_code=error, api_keys=[r.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                             for k, (lo, hi) in sorted(_SERVED.items())])

    def _k18(self, req):
        return self._api_versions()

    def _k3(self, req):  # Metadata: one broker (this), the topic with one partition
        r = self.registry.RESPONSES[3]
        part = r.MetadataResponsePartition(partition_index=0, leader_id=1, leader_epoch=0, replica_nodes=[1],
                                           isr_nodes=[1], offline_replicas=[])
        names = [self.topic] if not req.topics else [q.name for q in req.topics]
        topics = [r.MetadataResponseTopic(name=n, partitions=[part]) if n == self.topic
                  else r.MetadataResponseTopic(error_code=3, name=n) for n in names]  # UNKNOWN_TOPIC_OR_PARTITION
        return r(brokers=[r.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=self.port)],
                 cluster_id="floor", controller_id=1, topics=topics)

    def _k2(self, req):  # ListOffsets: earliest and latest only
        r = self.registry.RESPONSES[2]
        start, end = (self.bases[0], self.lasts[-1] + 1) if self.bases else (0, 0)
        return r(topics=[r.ListOffsetsTopicResponse(name=t.name, partitions=[
            r.ListOffsetsPartitionResponse(partition_index=p.partition_index, timestamp=-1,
                                           offset=start if p.timestamp == -2 else end, leader_epoch=0)
            for p in t.partitions]) for t in req.topics])

    def _k10(self, req):  # no group coordinator here
        return self.registry.RESPONSES[10](error_code=15, node_id=-1, host="", port=-1)

    def _k1(self, req):  # Fetch: whole batches from the fetch offset, one contiguous byte range
        from protocol.primitives import FileChunk

        r = self.registry.RESPONSES[1]
        end = self.lasts[-1] + 1 if self.lasts else 0
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                records: list = []
                if t.topic == self.topic and p.partition == 0 and p.fetch_offset < end:
                    i = bisect.bisect_right(self.bases, p.fetch_offset) - 1
                    if i < 0 or self.lasts[i] < p.fetch_offset:
                        i += 1
                    j, total = i, 0
                    while j < len(self.sizes) and (j == i or total + self.sizes[j] <= p.partition_max_bytes):
                        total += self.sizes[j]
                        j += 1
                    records = [FileChunk(self.fd, self.poss[i], total)]
                parts.append(r.PartitionData(partition_index=p.partition, high_watermark=end, last_stable_offset=end,
                                             log_start_offset=self.bases[0] if self.bases else 0,
                                             records=records))
            topics.append(r.FetchableTopicResponse(topic=t.topic, partitions=parts))
        if not any(p.records for t in topics for p in t.partitions):
            time.sleep(min(req.max_wait_ms, 1000) / 1000.0)  # nothing new will come: the long poll's wait
        return r(responses=topics)


def _recv_exact(conn: socket.socket, n: int) -> bytearray | None:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = conn.recv_into(view[got:])
        if not k:
            return None
        got += k
    return buf


def _kafka_child(path: str, topic: str, listener: socket.socket, repo: str) -> None:
    sys.path.insert(0, repo)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    _KafkaFloor(path, topic, listener).run()


def start_kafka(path: str, topic: str) -> tuple[int, str, "mp.Process"]:
    """Serve ``topic``-0 from the segment file ``path`` in a child process: (pid, bootstrap, process)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = mp.get_context("fork").Process(target=_kafka_child, args=(path, topic, listener, repo), daemon=True)
    p.start()
    listener.close()
    return p.pid, f"127.0.0.1:{port}", p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default=None, help="file to send (default: --mb MB of random bytes in a temp file)")
    ap.add_argument("--mb", type=int, default=400, help="MB to send per repetition")
    ap.add_argument("--chunk", type=int, default=1024 * 1024, help="bytes per answer")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kafka", default=None, metavar="SEGMENT",
                    help="serve this segment file as TOPIC-0 to Kafka consumers until Ctrl-C (prints the bootstrap)")
    ap.add_argument("--topic", default="floor")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.kafka:
        pid, bootstrap, proc = start_kafka(args.kafka, args.topic)
        print(f"serving {args.topic}-0 from {args.kafka} on {bootstrap} (pid {pid})", flush=True)
        try:
            proc.join()
        except KeyboardInterrupt:
            proc.terminate()
        return 0
    path, tmp = args.file, None
    if path is None:
        fd, tmp = tempfile.mkstemp(prefix="sendfile-floor-")
        with os.fdopen(fd, "wb") as f:
            for _ in range(args.mb):
                f.write(os.urandom(1_000_000))
        path = tmp
    try:
        rows = [run(path, args.mb * 1_000_000, args.chunk) for _ in range(args.repeat)]
    finally:
        if tmp:
            os.unlink(tmp)
    for i, r in enumerate(rows):
        print(f"rep {i + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print("\n# sendfile floor, CPU ms per MB (medians)")
    C.table([{"n": len(rows), **med, "min_server": min(r["server"] for r in rows),
              "max_server": max(r["server"] for r in rows)}],
            ["n", "server", "min_server", "max_server", "server_user", "server_sys", "client_sys", "ksoftirqd"])
    C.write_json(args.json, {"bench": "sendfile_floor", "rows": rows, "median": med})
    return 0


if __name__ == "__main__":
    sys.exit(main())
