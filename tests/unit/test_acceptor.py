"""broker/acceptor.py on the default asyncio loop (the integration tests run the broker under uvloop):
an accept that meets the open-file limit is logged once, the waiting client is refused at once (not left
hanging), and accepting resumes by itself."""
from __future__ import annotations

import asyncio
import errno
import logging
import socket

from broker import acceptor as acceptor_mod
from broker.acceptor import Acceptor, listening_sockets
from broker.log.faults import FD_RESERVE, FaultLog
from tests.support import until_async


class AtTheLimit:
    """A listening socket whose accept() fails with EMFILE while ``limit`` is set and the descriptor
    reserve is held (releasing the reserve makes room, as it does in a process at its limit)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.limit = False

    def accept(self):
        if self.limit and FD_RESERVE.held:
            raise OSError(errno.EMFILE, "Too many open files")
        return self.sock.accept()

    def __getattr__(self, name):
        return getattr(self.sock, name)


class Proto(asyncio.Protocol):
    made: list = []

    def connection_made(self, transport):
        Proto.made.append(transport)
        transport.write(b"hello")


async def _connect(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await asyncio.wait_for(reader.read(5), 5)  # b"" when refused: closed at once
    finally:
        writer.close()


async def test_accepting_at_the_open_file_limit(monkeypatch, caplog):
    monkeypatch.setattr(acceptor_mod, "ACCEPT_FAULTS", FaultLog(logging.getLogger("t.accept"), "accept error"))
    monkeypatch.setattr(acceptor_mod, "RETRY_S", 0.05)
    monkeypatch.setattr(acceptor_mod, "RECOVERED_AFTER_S", 0.2)
    FD_RESERVE.enable()
    [sock] = listening_sockets("127.0.0.1", 0)
    fake = AtTheLimit(sock)
    acc = Acceptor(fake, Proto, name="test")
    acc.start()
    try:
        with caplog.at_level(logging.INFO):
            assert await _connect(acc.port) == b"hello"
            fake.limit = True
            for _ in range(3):
                assert await _connect(acc.port) == b""  # refused, not left in the backlog
            assert FD_RESERVE.held == FD_RESERVE.size  # taken back after each refusal
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert warnings == [f"accept error: accept test 127.0.0.1:{acc.port} failed: Too many open files "
                                f"(EMFILE)"]
            fake.limit = False
            assert await _connect(acc.port) == b"hello"
            await until_async(lambda: any("accepting connections again" in r.getMessage() for r in caplog.records),
                              5, "the end of the episode logged")
            assert any(f"accepting connections again on test 127.0.0.1:{acc.port} (3 refused" in r.getMessage()
                       for r in caplog.records)
    finally:
        acc.close()
        for t in Proto.made:
            t.close()
        FD_RESERVE.disable()
