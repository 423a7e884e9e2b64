"""``max.connections``: the broker serves at most that many client connections at once.

Kafka's ``max.connections`` (SocketServer ``ConnectionQuotas``) bounds the connections the
broker holds; a connection beyond it is not served while the broker is at the limit (Kafka's
acceptor holds it until a slot frees; this broker refuses it: docs/configuration.md "max.connections"), the
connections already open are unaffected, and a slot freed by a client closing is usable again.
"""
from __future__ import annotations

import socket
import struct

from confluent_kafka import Producer

from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.request_header import RequestHeader
from tests.support import unique, until
from tests.wire import WireClient

LIMIT = 3
PING = ApiVersionsRequest(client_software_name="limit", client_software_version="1")


def served(w: WireClient) -> bool:
    r = w.request(PING, 3)
    return r.error_code == 0 and any(k.api_key == 18 for k in r.api_keys)


def refused(bootstrap: str) -> bool:
    """True if a new connection gets no answer to ApiVersions: the broker closes it."""
    host, port = bootstrap.rsplit(":", 1)
    body = RequestHeader(request_api_key=18, request_api_version=3, correlation_id=1,
                         client_id="limit").encode(2) + PING.encode(3)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        try:
            s.sendall(struct.pack(">i", len(body)) + body)
            data = s.recv(4)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            raise AssertionError("the broker neither answered nor closed the connection") from None
        return not data


def test_connections_beyond_max_connections_are_not_served(broker_factory):
    b = broker_factory({"max.connections": LIMIT})
    held = [WireClient(b.bootstrap) for _ in range(LIMIT)]
    try:
        assert all(served(w) for w in held), "up to the limit, every connection is served"
        assert refused(b.bootstrap), f"connection {LIMIT + 1} was served"
        assert refused(b.bootstrap), "still at the limit"
        assert all(served(w) for w in held), "the open connections are unaffected"

        held.pop(0).close()
        # the broker notices the close asynchronously: a new connection is served once it has
        until(lambda: not refused(b.bootstrap), 10, "a connection served after one closed")
        extra = WireClient(b.bootstrap)
        held.append(extra)
        assert served(extra)
        assert refused(b.bootstrap), "back at the limit"
    finally:
        for w in held:
            w.close()

    # with every connection closed, a real client (bootstrap + broker connection: 2) works again
    until(lambda: not refused(b.bootstrap), 10, "the slots to free up")
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce(unique("limit"), b"v")  # auto-created
    assert p.flush(15) == 0
