"""Handler registry: one module per API under ``broker/handlers/``.

A handler is registered with::

    @handler(ApiKey.SHARE_FETCH, versions=(1, 2), acl=(Acl(READ, GROUP), Acl(READ, TOPIC)))
    async def share_fetch(ctx: RequestContext, req: ShareFetchRequest) -> ShareFetchResponse:
        ...

The table is dense and indexed by API key; ApiVersions is built from it, so what
we advertise is exactly what we serve.  ``advertise`` widens the advertised range
below what is served where Kafka does so (Produce v0-2 are advertised, then
rejected).  Handlers are thin: validate, call the owning component, build the
response.  A handler may return ``None`` to send no response (Produce acks=0).
``fast`` (optional) answers an API's common case straight from the frame, before the
request is decoded (Produce: ``broker.handlers.produce.fast_produce``); it runs only
when the handler's ``acl`` is empty and returns False to leave the request to ``fn``.
It returns where the response's ``throttle_time_ms`` is, for the pipeline to fill in once client
quotas have counted the request (``broker.quotas.Quotas.finish_fast``).

``acl`` declares what Kafka's authorizer checks for the API (operation on resource
type, as ``kafka.server.KafkaApis`` does); the request pipeline
(``broker.pipeline``) hands it to the authorizer before the handler runs.  Handlers
reach the broker's parts through ``ctx.components`` (``broker.components``).
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Awaitable, Callable, NamedTuple

from protocol.lazy_messages import resolve_names
from protocol.messages.registry import REQUESTS, RESPONSES, ApiKey

HandlerFn = Callable[..., Awaitable[object]]
# fast(components, frame, body_position, version, response) -> int: answer the common case of an API
# straight from the frame, appending the response body to ``response``, and return the offset of the
# response's throttle_time_ms in it (always > 0); 0 / False: not handled (nothing done), the request
# goes the general way.  It runs synchronously: client quotas count it afterwards in one call.
# It may also return a ``Deferred``: the response is complete in ``response`` but goes out only once
# ``wait`` is done (Produce acks=all in durable mode: the fsync), through ``finish(exc)``.
FastFn = Callable[..., "int | Deferred"]


class Deferred:
    """An answer held until ``wait`` (an awaitable; durable mode's fsync) is done, then made by
    ``finish(exc)`` (``exc``: what ``wait`` raised, or None). The connection handles its next Produce
    meanwhile, so the appends of pipelined requests share one fsync (group commit), and answers still go
    out in request order (``server.Connection._defer``). A general-path handler returns one whose
    ``finish`` gives the response object; a fast path, one whose ``finish`` gives the throttle offset
    (the response, already in the buffer, rewritten if ``exc`` says the write failed)."""

    __slots__ = ("wait", "finish")

    def __init__(self, wait, finish):
        self.wait = wait
        self.finish = finish


class Encoded:
    """A response body encoded before, sent as it is: what a handler returns for an answer that repeats
    byte for byte (ApiVersions). It has no ``throttle_time_ms`` for client quotas to fill in, so a handler
    returns one only for a request that no quota counts (``ctx.quota`` None)."""

    __slots__ = ("body",)

    def __init__(self, body: bytes):
        self.body = body

    def encode_into(self, b: bytearray, version: int, sp=None) -> None:
        b += self.body


# Kafka's AclOperation and ResourceType names (org.apache.kafka.common.acl / resource).
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, \
    IDEMPOTENT_WRITE = ("READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
                        "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE")
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"


class Acl(NamedTuple):
    """One authorization an API needs: ``operation`` on resources of ``resource_type``."""

    operation: str
    resource_type: str


class Handler:
    """One registered API.  Its message classes are looked up on first use (``request_cls``: the broker
    does it for every API at start-up, ``load_request_path``); then the message classes the handler's
    module names through ``protocol.lazy_messages`` are put in place of their stand-ins
    (``resolve_names``), so the handler calls the real classes."""

    __slots__ = ("api_key", "min_version", "max_version", "fn", "_request_cls", "advertised_min", "acl", "fast")

    def __init__(self, api_key: int, versions: tuple[int, int], fn: HandlerFn, advertised_min: int,
                 acl: tuple[Acl, ...] = (), fast: FastFn | None = None):
        self.fast = fast
        self.api_key = api_key
        self.min_version, self.max_version = versions
        self.fn = fn
        self._request_cls = None  # REQUESTS[api_key], once looked up
        self.advertised_min = advertised_min
        self.acl = acl

    @property
    def request_cls(self) -> type:
        cls = self._request_cls
        if cls is None:
            cls = self._request_cls = REQUESTS[self.api_key]
            if self.min_version < cls.MIN_VERSION or self.max_version > cls.MAX_VERSION:
                raise ValueError(f"{cls.__name__}: versions {self.min_version}-{self.max_version} "
                                 "outside the schema's range")
            for fn in (self.fn, self.fast):
                if fn is not None:
                    resolve_names(fn.__globals__)
        return cls

    @property
    def response_cls(self) -> type:
        return RESPONSES[self.api_key]


HANDLERS: list[Handler | None] = [None] * 128
REGISTERED = [0]  # handlers registered so far: what a cache of ApiVersions answers is keyed on


def handler(api_key: ApiKey, versions: tuple[int, int], advertise_from: int | None = None,
            acl: tuple[Acl, ...] = (), fast: FastFn | None = None):
    def register(fn: HandlerFn) -> HandlerFn:
        lo, hi = versions
        if api_key not in REQUESTS:
            raise ValueError(f"no message schema for API key {api_key}")
        if HANDLERS[api_key] is not None:
            raise ValueError(f"two handlers for {ApiKey(api_key).name}")
        if fast is not None and acl:
            raise ValueError(f"{ApiKey(api_key).name}: a fast path skips the declared acl")
        REGISTERED[0] += 1
        HANDLERS[api_key] = Handler(int(api_key), versions, fn,
                                    lo if advertise_from is None else advertise_from, tuple(acl), fast)
        return fn

    return register


def load_handlers() -> list[Handler | None]:
    """Import every module of broker.handlers so their decorators register them."""
    import broker.handlers as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"broker.handlers.{info.name}")
    return HANDLERS


# Modules the request path imports on first use (inside functions, or through lazy attributes); an
# import opens files, which fails at the open-file limit.
REQUEST_PATH_MODULES = ("hashlib", "hmac", "secrets", "uuid", "broker.client_metrics", "broker.share.partition",
                        "broker.share.dlq", "broker.security.scram")


def load_request_path() -> None:
    """Import everything a request can need, before connections are accepted.

    The codecs and other parts are otherwise imported on first use (``protocol.lazy_messages``), and an
    import opens files: at the open-file limit (EMFILE) a new connection's first ApiVersions would fail
    to load its codec and the connection would close unanswered, also after a restart under the same
    limit. So the broker loads them all at start-up (~12 MiB and ~0.25 s, the price of answering at
    the limit): every generated codec module, every handler's classes (``Handler.request_cls`` puts the
    real classes in place of the stand-ins), the lazy registries' entries (message classes, coordinator
    record classes, assignors), CRC32C and the optional compression codecs, ``REQUEST_PATH_MODULES``,
    and the stand-ins any loaded module still names. What no request needs stays deferred (the
    cleaner's pass code, the status page, name lookups: broker/README.md, "Start-up and idle memory")."""
    import sys

    import protocol.coordinator_records
    import protocol.messages
    from protocol import compression, records
    from protocol.lazy_messages import LazyMapping

    for pkg in (protocol.messages, protocol.coordinator_records):
        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{pkg.__name__}.{info.name}")
    for name in REQUEST_PATH_MODULES:
        importlib.import_module(name)
    for h in HANDLERS:
        if h is not None:
            _ = h.request_cls, h.response_cls
    records.crc32c(b"")
    compression.available(compression.ZSTD)  # imports the optional extra when installed
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("broker", "coordinator", "protocol")):
            continue
        namespace = vars(module)
        resolve_names(namespace)
        for value in list(namespace.values()):
            if isinstance(value, LazyMapping):
                for key in value:
                    value.get(key)


def api_version_ranges() -> list[tuple[int, int, int]]:
    """(api key, advertised min, max) for every registered handler: what ApiVersions advertises."""
    return [(h.api_key, h.advertised_min, h.max_version) for h in HANDLERS if h is not None]


class RequestContext:
    """What a handler knows about the request besides its body."""

    __slots__ = ("components", "connection", "api_key", "api_version", "correlation_id", "client_id",
                 "principal", "listener", "host", "quota")

    def __init__(self, components, connection, api_key: int, api_version: int, correlation_id: int,
                 client_id: str | None, principal: str = "User:ANONYMOUS", listener=None, host: str = "*"):
        self.components = components
        self.connection = connection
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.principal = principal  # "User:name" (broker.pipeline.Authenticator.principal)
        self.listener = listener  # broker.security.listeners.Listener the request came on (None in unit tests)
        self.host = host  # the client's address, as ACLs match it
        self.quota = None  # broker.quotas.RequestQuota while client quotas are configured (set by the pipeline)

    @property
    def client_host(self) -> str:
        """The member's ClientHost in group APIs, as Kafka writes it (``InetAddress.toString()``:
        "/" + address, brackets-free for IPv6); "" when the address is unknown."""
        return "/" + self.host if self.host not in ("", "?", "*") else ""

    def endpoint(self) -> tuple[str, int]:
        """The advertised (host, port) of the listener the request came on, as Kafka answers Metadata."""
        lst = self.listener
        if lst is None:
            node = self.components.node
            return node.host, node.port
        return lst.advertised_host, lst.advertised_port
