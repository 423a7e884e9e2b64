"""A small recording TCP proxy for Kafka-protocol traffic.

It listens on ``127.0.0.1:0`` (or a given address), forwards every connection to a
target broker and writes each frame it sees (the frame bytes after the 4-byte length
prefix) to ``OUT_DIR`` as hex:

    <api_snake>_req_v<version>_<nnn>.hex    request frames (header + body)
    <api_snake>_resp_v<version>_<nnn>.hex   response frames (header + body)

It parses only the request header's fixed part (api key int16, api version int16,
correlation id int32) and pairs each response with its request by correlation id,
per connection.  ``nnn`` counts per name prefix, from 000.

Clients learn broker addresses from Metadata / FindCoordinator / DescribeCluster
responses; those must point at the proxy or the clients will bypass it.  Either start
the broker so that it advertises the proxy's address (tansu:
``--advertised-listener-url``), or pass ``rewrite_advertised=True``: the proxy then
decodes responses that can carry broker addresses with the project's codec and
replaces the target's address with its own.  Recorded frames are always the bytes the
broker sent, before any rewrite.

Usage as a program (Ctrl-C stops it):

    python -m tests.tools.capture_proxy --target 127.0.0.1:9092 --out /tmp/frames [--rewrite]

From Python, ``CaptureProxy`` is an asyncio object and ``ProxyThread`` runs one on a
background event loop for synchronous clients.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("capture_proxy")

_LEN = struct.Struct(">i")
_REQ_FIXED = struct.Struct(">hhi")
_CORR = struct.Struct(">i")
MAX_FRAME = 100 * 1024 * 1024

# Responses that can carry broker addresses (host/port pairs): Produce, Fetch,
# Metadata, FindCoordinator, DescribeCluster, ShareFetch, ShareAcknowledge.
_ADDRESS_APIS = {0, 1, 3, 10, 60, 78, 79}


def api_snake(api_key: int) -> str:
    """``share_fetch`` for 78; ``api<key>`` for keys the project has no codec for."""
    try:
        from protocol.messages.registry import ApiKey
        return ApiKey(api_key).name.lower()
    except (ImportError, ValueError):
        return f"api{api_key}"


def frame_name(api_key: int, version: int, kind: str, index: int) -> str:
    return f"{api_snake(api_key)}_{kind}_v{version}_{index:03d}.hex"


def to_hex(frame: bytes, width: int = 64) -> str:
    """Hex text, ``width`` bytes per line (``bytes.fromhex`` skips the newlines)."""
    h = frame.hex()
    step = width * 2
    return "\n".join(h[i:i + step] for i in range(0, len(h), step)) + "\n"


def read_hex(path: Path) -> bytes:
    return bytes.fromhex(path.read_text())


@dataclass
class Frame:
    kind: str  # "req" or "resp"
    api_key: int
    api_version: int
    correlation_id: int
    data: bytes
    client_id: str | None = None
    path: Path | None = None


def request_client_id(frame: bytes) -> str | None:
    """The client id of a request frame (a non-compact nullable string in header v1 and v2)."""
    if len(frame) < 10:
        return None
    (n,) = struct.unpack_from(">h", frame, 8)
    if n < 0:
        return None
    return bytes(frame[10:10 + n]).decode("utf-8", "replace")


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readexactly(4)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    (n,) = _LEN.unpack(head)
    if n < 0 or n > MAX_FRAME:
        raise ValueError(f"bad frame length {n}")
    try:
        return await reader.readexactly(n)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def _response_header_version(api_key: int, api_version: int) -> int:
    from protocol.messages.registry import RESPONSES
    if api_key == 18:  # ApiVersions responses always use header v0
        return 0
    cls = RESPONSES[api_key]
    return 1 if cls.FLEXIBLE_VERSION is not None and api_version >= cls.FLEXIBLE_VERSION else 0


def _rewrite_addresses(obj, old: tuple[str, int], new: tuple[str, int]) -> int:
    """Replace host/port == old by new anywhere in a decoded message; return the count."""
    count = 0
    slots = getattr(type(obj), "__slots__", ())
    if "host" in slots and "port" in slots and (obj.host, obj.port) == old:
        obj.host, obj.port = new
        count += 1
    for s in slots:
        v = getattr(obj, s, None)
        if isinstance(v, list):
            for item in v:
                if hasattr(type(item), "__slots__"):
                    count += _rewrite_addresses(item, old, new)
        elif hasattr(type(v), "__slots__") and not isinstance(v, (str, bytes)):
            count += _rewrite_addresses(v, old, new)
    return count


def rewrite_response(frame: bytes, api_key: int, api_version: int,
                     old: tuple[str, int], new: tuple[str, int]) -> bytes:
    """``frame`` with broker address ``old`` replaced by ``new`` (unchanged if absent)."""
    if api_key not in _ADDRESS_APIS:
        return frame
    from protocol.messages.registry import RESPONSES
    from protocol.messages.response_header import ResponseHeader
    cls = RESPONSES.get(api_key)
    if cls is None or not cls.MIN_VERSION <= api_version <= cls.MAX_VERSION:
        return frame
    hv = _response_header_version(api_key, api_version)
    m = memoryview(frame)
    header, p = ResponseHeader.decode_from(m, 0, hv)
    body, _ = cls.decode_from(m, p, api_version)
    if not _rewrite_addresses(body, old, new):
        return frame
    return header.encode(hv) + body.encode(api_version)


class CaptureProxy:
    """Forward connections to ``target`` and record every frame into ``out_dir``."""

    def __init__(self, target: tuple[str, int], out_dir: str | Path | None,
                 listen: tuple[str, int] = ("127.0.0.1", 0), rewrite_advertised: bool = False):
        self.target = target
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.listen = listen
        self.rewrite_advertised = rewrite_advertised
        self.frames: list[Frame] = []
        self._counters: dict[str, itertools.count] = {}
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._lock = threading.Lock()
        self.address: tuple[str, int] | None = None

    @property
    def port(self) -> int:
        assert self.address is not None, "proxy not started"
        return self.address[1]

    async def start(self) -> "CaptureProxy":
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        self._server = await asyncio.start_server(self._on_client, *self.listen)
        self.address = self._server.sockets[0].getsockname()[:2]
        log.info("proxy %s:%d -> %s:%d", *self.address, *self.target)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> "CaptureProxy":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    # ------------------------------------------------------------ recording
    def _record(self, kind: str, api_key: int, version: int, corr: int, data: bytes,
                client_id: str | None) -> None:
        with self._lock:
            prefix = f"{api_snake(api_key)}_{kind}_v{version}"
            index = next(self._counters.setdefault(prefix, itertools.count()))
            frame = Frame(kind, api_key, version, corr, data, client_id)
            if self.out_dir is not None:
                frame.path = self.out_dir / frame_name(api_key, version, kind, index)
                frame.path.write_text(to_hex(data))
            self.frames.append(frame)

    # ------------------------------------------------------------ forwarding
    async def _on_client(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            b_reader, b_writer = await asyncio.open_connection(*self.target)
        except OSError as e:
            log.warning("cannot reach target %s:%d: %s", *self.target, e)
            c_writer.close()
            self._tasks.discard(task)
            return
        pending: dict[int, tuple[int, int]] = {}
        up = asyncio.create_task(self._pump_requests(c_reader, b_writer, pending))
        down = asyncio.create_task(self._pump_responses(b_reader, c_writer, pending))
        self._tasks.update((up, down))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (up, down):
                t.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
            for w in (c_writer, b_writer):
                w.close()
            self._tasks.difference_update((up, down, task))

    async def _pump_requests(self, reader, writer, pending) -> None:
        while (frame := await _read_frame(reader)) is not None:
            if len(frame) >= 8:
                api_key, version, corr = _REQ_FIXED.unpack_from(frame)
                client_id = request_client_id(frame)
                pending[corr] = (api_key, version, client_id)
                self._record("req", api_key, version, corr, frame, client_id)
            writer.write(_LEN.pack(len(frame)) + frame)
            await writer.drain()

    async def _pump_responses(self, reader, writer, pending) -> None:
        while (frame := await _read_frame(reader)) is not None:
            out = frame
            if len(frame) >= 4:
                (corr,) = _CORR.unpack_from(frame)
                req = pending.pop(corr, None)
                if req is not None:
                    api_key, version, client_id = req
                    self._record("resp", api_key, version, corr, frame, client_id)
                    if self.rewrite_advertised:
                        try:
                            out = rewrite_response(frame, api_key, version,
                                                   tuple(self.target), tuple(self.address))
                        except Exception:  # never break the client over a rewrite
                            log.exception("cannot rewrite %s v%d response", api_snake(api_key), version)
            writer.write(_LEN.pack(len(out)) + out)
            await writer.drain()


class ProxyThread:
    """Run a ``CaptureProxy`` on its own event loop in a daemon thread.

    ``with ProxyThread(("127.0.0.1", 9092), out_dir) as proxy: ... proxy.port ...``
    """

    def __init__(self, target: tuple[str, int], out_dir: str | Path | None, **kw):
        self.proxy = CaptureProxy(target, out_dir, **kw)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="capture-proxy", daemon=True)

    def __enter__(self) -> CaptureProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self._loop).result(10)
        return self.proxy

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def _parse_addr(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=_parse_addr, required=True, metavar="HOST:PORT")
    ap.add_argument("--listen", type=_parse_addr, default=("127.0.0.1", 0), metavar="HOST:PORT")
    ap.add_argument("--out", required=True, help="directory for the hex files")
    ap.add_argument("--rewrite", action="store_true", help="rewrite advertised broker addresses")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    async def run() -> None:
        async with CaptureProxy(args.target, args.out, args.listen, args.rewrite) as proxy:
            print(f"listening on {proxy.address[0]}:{proxy.port}", flush=True)
            await asyncio.Event().wait()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
