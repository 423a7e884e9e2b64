"""Handler registry: one module per API under ``broker/handlers/``.

A handler is registered with::

    @handler(ApiKey.SHARE_FETCH, versions=(1, 2))
    async def share_fetch(ctx: RequestContext, req: ShareFetchRequest) -> ShareFetchResponse:
        ...

The table is dense and indexed by API key; ApiVersions is built from it, so what
we advertise is exactly what we serve.  ``advertise`` widens the advertised range
below what is served where Kafka does so (Produce v0-2 are advertised, then
rejected).  Handlers are thin: validate, call the owning component, build the
response.  A handler may return ``None`` to send no response (Produce acks=0).
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Awaitable, Callable

from protocol.messages.registry import REQUESTS, RESPONSES, ApiKey

HandlerFn = Callable[..., Awaitable[object]]


class Handler:
    __slots__ = ("api_key", "min_version", "max_version", "fn", "request_cls", "response_cls",
                 "advertised_min")

    def __init__(self, api_key: int, versions: tuple[int, int], fn: HandlerFn, advertised_min: int):
        self.api_key = api_key
        self.min_version, self.max_version = versions
        self.fn = fn
        self.request_cls = REQUESTS[api_key]
        self.response_cls = RESPONSES[api_key]
        self.advertised_min = advertised_min


HANDLERS: list[Handler | None] = [None] * 128


def handler(api_key: ApiKey, versions: tuple[int, int], advertise_from: int | None = None):
    def register(fn: HandlerFn) -> HandlerFn:
        cls = REQUESTS[api_key]
        lo, hi = versions
        if lo < cls.MIN_VERSION or hi > cls.MAX_VERSION:
            raise ValueError(f"{cls.__name__}: versions {versions} outside the schema's range")
        if HANDLERS[api_key] is not None:
            raise ValueError(f"two handlers for {ApiKey(api_key).name}")
        HANDLERS[api_key] = Handler(int(api_key), versions, fn,
                                    lo if advertise_from is None else advertise_from)
        return fn

    return register


def load_handlers() -> list[Handler | None]:
    """Import every module of broker.handlers so their decorators register them."""
    import broker.handlers as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"broker.handlers.{info.name}")
    return HANDLERS


class RequestContext:
    """What a handler knows about the request besides its body."""

    __slots__ = ("broker", "connection", "api_key", "api_version", "correlation_id", "client_id")

    def __init__(self, broker, connection, api_key: int, api_version: int, correlation_id: int,
                 client_id: str | None):
        self.broker = broker
        self.connection = connection
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
