"""A small synchronous Kafka protocol client for the operator commands.

It speaks the wire protocol with the project's codec (``protocol.messages``) over plain blocking
sockets, so it needs nothing beyond the standard library and works against sharebroker and against
an Apache Kafka 4.x cluster alike:

- ``AdminClient(bootstrap)`` connects to the first reachable ``host:port`` of a comma-separated
  bootstrap list and negotiates versions with ApiVersions (v3, falling back to v0 when the broker
  answers UNSUPPORTED_VERSION, as Kafka's clients do);
- ``request(req)`` sends a generated request at the highest version both sides support (or at the
  version asked for) and returns the decoded response;
- ``metadata()``, ``coordinator(group)`` and ``leaders()`` route requests the way Kafka's admin
  client does: group APIs to the group coordinator (FindCoordinator key type GROUP), ListOffsets to
  each partition's leader, ListGroups to every broker.

Errors are ``AdminError`` (one line, for the operator), ``BrokerUnreachable`` when no connection can
be made or a request times out.
"""
from __future__ import annotations

import base64
import socket
import struct
import time
from dataclasses import dataclass

from protocol.errors import Errors
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.registry import RESPONSES
from protocol.messages.request_header import RequestHeader
from protocol.messages.response_header import ResponseHeader

_SIZE = struct.Struct(">i")
API_VERSIONS_KEY = 18
CLIENT_SOFTWARE = "sharebroker-admin"
# Errors after which Kafka's admin client looks the coordinator up again and retries.
RETRIABLE_COORDINATOR_ERRORS = frozenset({
    Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR})


class AdminError(Exception):
    """A failure to report to the operator in one line; ``code`` is the Kafka error code, if any."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


class BrokerUnreachable(AdminError):
    """No broker of the bootstrap list could be reached, or a request timed out."""


class UnsupportedApi(AdminError):
    """The broker does not advertise the API, or no version both sides know."""


def error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return f"error code {code}"


def error_text(code: int, message: str | None = None) -> str:
    """``message`` when the broker sent one, else the error's name (``GROUP_ID_NOT_FOUND``)."""
    return message or error_name(code)


def uuid_str(raw: bytes) -> str:
    """A topic id as Kafka prints it (``Uuid.toString``: URL-safe base64 without padding)."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]``; IPv6 hosts may be bracketed (``[::1]:9092``)."""
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise AdminError(f"invalid bootstrap server '{item}' (expected host:port)")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise AdminError("no bootstrap server given")
    return out


class Connection:
    """One blocking socket to one broker, with that broker's negotiated API versions."""

    def __init__(self, host: str, port: int, timeout: float, client_id: str):
        self.address = f"{host}:{port}"
        self.timeout = timeout
        self.client_id = client_id
        self._corr = 0
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise BrokerUnreachable(f"cannot connect to {self.address}: {e.strerror or e}") from None
        self.sock.settimeout(timeout)
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()

    def close(self) -> None:
        self.sock.close()

    # ------------------------------------------------------------ frames
    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except socket.timeout:
                raise BrokerUnreachable(f"no answer from {self.address} within {self.timeout:g} s") from None
            except OSError as e:
                raise BrokerUnreachable(f"connection to {self.address} failed: {e.strerror or e}") from None
            if not chunk:
                raise BrokerUnreachable(f"connection to {self.address} closed by the broker")
            buf += chunk
        return bytes(buf)

    def send_receive(self, req, version: int):
        """Send ``req`` at ``version`` and decode its response (header rules of the protocol:
        request header v2 for flexible versions, else v1; response header v1 for flexible
        versions except ApiVersions, whose response header is always v0)."""
        cls = type(req)
        flexible = cls.FLEXIBLE_VERSION is not None and version >= cls.FLEXIBLE_VERSION
        self._corr += 1
        header = RequestHeader(request_api_key=cls.API_KEY, request_api_version=version,
                               correlation_id=self._corr, client_id=self.client_id)
        body = header.encode(2 if flexible else 1) + req.encode(version)
        try:
            self.sock.sendall(_SIZE.pack(len(body)) + body)
        except OSError as e:
            raise BrokerUnreachable(f"connection to {self.address} failed: {e.strerror or e}") from None
        size = _SIZE.unpack(self._read(4))[0]
        frame = memoryview(self._read(size))
        resp_cls = RESPONSES[cls.API_KEY]
        resp_flexible = resp_cls.FLEXIBLE_VERSION is not None and version >= resp_cls.FLEXIBLE_VERSION
        header_version = 1 if resp_flexible and cls.API_KEY != API_VERSIONS_KEY else 0
        resp_header, pos = ResponseHeader.decode_from(frame, 0, header_version)
        if resp_header.correlation_id != self._corr:
            raise AdminError(f"{self.address} answered correlation id {resp_header.correlation_id}, "
                             f"expected {self._corr}")
        return resp_cls.decode_from(frame, pos, version)[0]

    # ------------------------------------------------------------ versions
    def _negotiate(self) -> None:
        req = ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE, client_software_version="1")
        resp = self.send_receive(req, 3)
        if resp.error_code == Errors.UNSUPPORTED_VERSION:
            resp = self.send_receive(ApiVersionsRequest(), 0)
        if resp.error_code != Errors.NONE:
            raise AdminError(f"ApiVersions failed on {self.address}: {error_name(resp.error_code)}",
                             resp.error_code)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def supports(self, api_key: int) -> bool:
        return api_key in self.versions

    def version_for(self, cls, min_version: int | None = None, max_version: int | None = None) -> int:
        """The highest version of ``cls``'s API that both the broker and our codec support,
        within ``[min_version, max_version]`` when given."""
        name = cls.__name__.removesuffix("Request")
        if cls.API_KEY not in self.versions:
            raise UnsupportedApi(f"the broker at {self.address} does not support {name} (API {cls.API_KEY})")
        lo, hi = self.versions[cls.API_KEY]
        lo = max(lo, cls.MIN_VERSION, min_version if min_version is not None else 0)
        hi = min(hi, cls.MAX_VERSION, max_version if max_version is not None else cls.MAX_VERSION)
        if lo > hi:
            raise UnsupportedApi(f"the broker at {self.address} supports {name} only at versions "
                                 f"{self.versions[cls.API_KEY][0]}-{self.versions[cls.API_KEY][1]}")
        return hi

    def request(self, req, version: int | None = None, min_version: int | None = None):
        if version is None:
            version = self.version_for(type(req), min_version)
        return self.send_receive(req, version)


class AdminClient:
    """Connections to a cluster, opened on demand and kept for the life of the command."""

    def __init__(self, bootstrap: str, timeout_ms: int = 30000, client_id: str = CLIENT_SOFTWARE):
        self.timeout_ms = timeout_ms
        self.timeout = timeout_ms / 1000.0
        self.deadline = time.monotonic() + self.timeout
        self.client_id = client_id
        self._conns: dict[str, Connection] = {}
        errors = []
        self.bootstrap: Connection | None = None
        for host, port in parse_bootstrap(bootstrap):
            try:
                self.bootstrap = self._connect(host, port)
                break
            except BrokerUnreachable as e:
                errors.append(str(e))
        if self.bootstrap is None:
            raise BrokerUnreachable("broker unreachable: " + "; ".join(errors))
        self._metadata = None

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def _connect(self, host: str, port: int) -> Connection:
        key = f"{host}:{port}"
        conn = self._conns.get(key)
        if conn is None:
            conn = self._conns[key] = Connection(host, port, self.timeout, self.client_id)
        return conn

    def connection(self, node: Node) -> Connection:
        return self._connect(node.host, node.port)

    def request(self, req, version: int | None = None, node: Node | None = None, min_version: int | None = None):
        conn = self.bootstrap if node is None else self.connection(node)
        return conn.request(req, version, min_version)

    def supports(self, api_key: int, node: Node | None = None) -> bool:
        conn = self.bootstrap if node is None else self.connection(node)
        return conn.supports(api_key)

    def retry(self, what: str, attempt):
        """Call ``attempt()`` until it returns something other than None, with a short backoff,
        until the command's deadline (for coordinator loads / moves and leader elections)."""
        delay = 0.05
        while True:
            result = attempt()
            if result is not None:
                return result
            if time.monotonic() + delay > self.deadline:
                raise BrokerUnreachable(f"timed out after {self.timeout:g} s waiting for {what}")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    # ------------------------------------------------------------ metadata
    def metadata(self, topics: list[str] | None = None, refresh: bool = False):
        """A Metadata response for ``topics`` (all topics when None; never auto-creates).
        The all-topics answer is cached for the life of the client."""
        if topics is None and self._metadata is not None and not refresh:
            return self._metadata
        req = MetadataRequest(allow_auto_topic_creation=False)
        # null Topics = all topics (v1+; the codec's constructor turns None into [], so set it after)
        req.topics = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        resp = self.request(req, min_version=1)
        if topics is None:
            self._metadata = resp
        return resp

    def brokers(self) -> dict[int, Node]:
        md = self.metadata()
        return {b.node_id: Node(b.node_id, b.host, b.port) for b in md.brokers}

    def partitions(self, topics: list[str] | None = None) -> dict[str, list[int]]:
        """Existing partitions per topic (topics that do not exist are absent)."""
        md = self.metadata(topics)
        return {t.name: sorted(p.partition_index for p in t.partitions)
                for t in md.topics if t.error_code == Errors.NONE}

    def leaders(self, topics: list[str]) -> dict[tuple[str, int], Node | None]:
        md = self.metadata(topics)
        nodes = {b.node_id: Node(b.node_id, b.host, b.port) for b in md.brokers}
        return {(t.name, p.partition_index): nodes.get(p.leader_id)
                for t in md.topics if t.error_code == Errors.NONE for p in t.partitions}

    # ------------------------------------------------------------ coordinators
    def coordinator(self, group: str) -> Node:
        """The group coordinator of ``group`` (FindCoordinator, key type GROUP)."""
        conn = self.bootstrap

        def attempt():
            version = conn.version_for(FindCoordinatorRequest)
            if version >= 4:
                resp = conn.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), version)
                c = resp.coordinators[0]
                code, msg, node = c.error_code, c.error_message, Node(c.node_id, c.host, c.port)
            else:
                resp = conn.request(FindCoordinatorRequest(key=group, key_type=0), version)
                code, msg = resp.error_code, getattr(resp, "error_message", None)
                node = Node(resp.node_id, resp.host, resp.port)
            if code in RETRIABLE_COORDINATOR_ERRORS:
                return None
            if code != Errors.NONE:
                raise AdminError(f"FindCoordinator for group '{group}' failed: {error_text(code, msg)}", code)
            return node

        return self.retry(f"the coordinator of group '{group}'", attempt)

    def group_request(self, group: str, make_request, group_error, version: int | None = None,
                      min_version: int | None = None):
        """Send ``make_request()`` to ``group``'s coordinator, retrying (with a new coordinator
        look-up) while ``group_error(response)`` is a retriable coordinator error; returns
        ``(response, coordinator node)``."""
        def attempt():
            node = self.coordinator(group)
            resp = self.request(make_request(), version, node, min_version)
            if group_error(resp) in RETRIABLE_COORDINATOR_ERRORS:
                return None
            return resp, node

        return self.retry(f"the coordinator of group '{group}'", attempt)

    def all_brokers(self) -> list[Node]:
        return sorted(self.brokers().values(), key=lambda n: n.node_id)
