"""Accepting connections on one listening socket, ours rather than the event loop's (Kafka's ``Acceptor``).

The event loops' own servers handle running out of descriptors badly: asyncio logs every failed
``accept()`` with a traceback, and uvloop closes the listening socket for good on EMFILE (new
clients then get "connection refused" until a restart). Here:

- ``accept()`` failing with EMFILE / ENFILE (the open-file limit) is reported to :data:`ACCEPT_FAULTS`
  (a warning the first time, then "N more ... in the last M s"; counted for
  ``sharebroker_accept_errors_total``), the connections waiting in the backlog are refused at once
  (the descriptor reserve, :data:`broker.log.faults.FD_RESERVE`, lends one descriptor to accept
  each and close it, so a client sees its connection closed instead of waiting for a timeout), and
  accepting pauses for :data:`RETRY_S` before it is tried again;
- a connection accepted while the descriptor reserve is not full (and cannot be filled) is closed at
  once too: the descriptors a segment roll needs come before new connections;
- once connections are accepted again and none failed for :data:`RECOVERED_AFTER_S`, one line says
  so ("accepting connections again on ... (N refused while out of descriptors)"), so an operator
  sees when it ended.

Each accepted socket is handed to ``loop.connect_accepted_socket`` (TLS handshakes included); a
handshake that fails closes that connection only. The Kafka listeners (``broker/server.py``) and the
metrics listener (``broker/metrics.py``) both accept through it.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import socket

from broker.log.faults import FD_RESERVE, OUT_OF_FDS, FaultLog

log = logging.getLogger("sharebroker")

BACKLOG = 1024
RETRY_S = 0.5  # pause after an accept met the open-file limit
RECOVERED_AFTER_S = 2.0  # an accept this long after the last failure is logged as the end of the episode
ACCEPTS_PER_WAKE = 64  # at most this many accepts per readiness callback, so other work runs in between
ACCEPT_FAULTS = FaultLog(logging.getLogger("sharebroker.accept"), "accept error")
# errors of one pending connection (it went away before we accepted it): skip it, accept the next
_SKIP = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.ENETDOWN, errno.ENOPROTOOPT,
                   errno.EHOSTDOWN, errno.ENONET, errno.EHOSTUNREACH, errno.EOPNOTSUPP, errno.ENETUNREACH})


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound (not yet listening) sockets for ``host``:``port``, set up as ``loop.create_server`` sets them
    up (SO_REUSEADDR; an IPv6 one only IPv6). A literal address is bound without a name lookup."""
    addrs = []
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        addrs = [(family, (host, port))]
        break
    else:
        seen = set()
        for family, _, _, _, sockaddr in socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                            flags=socket.AI_PASSIVE):
            if (family, sockaddr[:2]) not in seen:
                seen.add((family, sockaddr[:2]))
                addrs.append((family, sockaddr))
    out = []
    try:
        for family, sockaddr in addrs:
            sock = socket.socket(family, socket.SOCK_STREAM)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(sockaddr)
            except OSError as e:
                raise OSError(e.errno, f"error while attempting to bind on address {sockaddr[:2]!r}: "
                                       f"{(e.strerror or str(e)).lower()}") from None
    except BaseException:
        for sock in out:
            sock.close()
        raise
    return out


class Acceptor:
    """Accepts on ``sock`` and hands each connection to ``protocol_factory`` (with ``ssl`` when set)."""

    def __init__(self, sock: socket.socket, protocol_factory, ssl=None, name: str = ""):
        self.sock = sock
        self.protocol_factory = protocol_factory
        self.ssl = ssl
        host, port = sock.getsockname()[:2]
        self.where = f"{name + ' ' if name else ''}{host}:{port}"
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading = False
        self._retry: asyncio.TimerHandle | None = None
        self._refused = 0  # connections refused since accepting last failed (0: accepting normally)
        self._failing = False
        self._failed_at = 0.0  # loop time of the last failed accept
        self._recovery_check: asyncio.TimerHandle | None = None  # _check_recovered, once an accept worked
        self._handshakes: set[asyncio.Task] = set()  # connect_accepted_socket tasks still running
        self.closed = False

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.sock.setblocking(False)
        self.sock.listen(BACKLOG)
        self._read()

    def _read(self) -> None:
        if not self._reading and not self.closed:
            self._loop.add_reader(self.sock.fileno(), self._accept)
            self._reading = True

    def _pause(self) -> None:
        if self._reading:
            self._loop.remove_reader(self.sock.fileno())
            self._reading = False

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                conn, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in _SKIP:
                    continue
                self._accept_failed(e)
                return
            if FD_RESERVE.held < FD_RESERVE.size and not FD_RESERVE.refill():
                # at the limit: the descriptors a segment roll needs come before a new connection
                conn.close()
                FD_RESERVE.refill()
                self._refused += 1
                self._accept_failed(OSError(errno.EMFILE, "Too many open files (the descriptor reserve "
                                                          "for segment rolls is not full)"))
                return
            if self._failing and self._recovery_check is None:
                self._recovery_check = self._loop.call_later(RECOVERED_AFTER_S, self._check_recovered)
            self._connect(conn)

    def _check_recovered(self) -> None:
        """Some time after an accept succeeded again: if none failed since, the episode is over."""
        self._recovery_check = None
        if not self._failing or self.closed:
            return
        quiet = self._loop.time() - self._failed_at
        if quiet < RECOVERED_AFTER_S:  # failed again since: look again once it has been quiet long enough
            self._recovery_check = self._loop.call_later(RECOVERED_AFTER_S - quiet, self._check_recovered)
            return
        self._failing = False
        log.info("accepting connections again on %s (%d refused while out of descriptors)", self.where, self._refused)
        self._refused = 0

    def _accept_failed(self, e: OSError) -> None:
        ACCEPT_FAULTS.report("accept", self.where, e)
        self._failing = True
        self._failed_at = self._loop.time()
        if e.errno in OUT_OF_FDS:
            self._refused += self._refuse_backlog()
        self._pause()
        self._retry = self._loop.call_later(RETRY_S, self._resume)

    def _refuse_backlog(self) -> int:
        """Accept and close at once every connection waiting, in room the descriptor reserve makes."""
        if not FD_RESERVE.held:
            return 0
        refused = 0
        FD_RESERVE.release()
        try:
            while refused < BACKLOG:
                try:
                    conn, _addr = self.sock.accept()
                except OSError:
                    break
                conn.close()
                refused += 1
        finally:
            FD_RESERVE.refill()
        return refused

    def _resume(self) -> None:
        self._retry = None
        FD_RESERVE.refill()
        self._read()

    def _connect(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        task = self._loop.create_task(self._loop.connect_accepted_socket(self.protocol_factory, conn, ssl=self.ssl))
        self._handshakes.add(task)
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task) -> None:
        self._handshakes.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            # a TLS handshake that failed or timed out, or a client gone before it: this connection only
            log.info("connection on %s failed before it started: %r", self.where, exc)

    def close(self) -> None:
        self.closed = True
        for timer in (self._retry, self._recovery_check):
            if timer is not None:
                timer.cancel()
        if self._loop is not None:
            self._pause()
        self.sock.close()
        for task in list(self._handshakes):
            task.cancel()
