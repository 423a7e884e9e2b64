"""The stages every request passes between decoding and its handler.

``broker.server`` runs them in this order for each decoded request::

    authenticate -> authorize -> time and count -> handler

- :class:`Authenticator` decides whether a connection may send this API yet (a SASL
  listener admits only ApiVersions / SaslHandshake / SaslAuthenticate before the
  client has authenticated) and names the principal.  The default,
  :class:`NoAuthentication`, admits everything as ``User:ANONYMOUS`` (a PLAINTEXT
  listener).
- :class:`Authorizer` checks the operations a handler declares with
  ``@handler(..., acl=...)`` (``broker.dispatch.Acl``); handlers that need
  per-resource answers (Metadata hiding topics, per-partition errors) ask
  ``ctx.authorizer`` themselves.  The default, :class:`AllowAll`, permits
  everything, which is what a Kafka broker without an authorizer does.
- :class:`RequestMetrics` counts requests and their handling time per API key
  (cheap enough to stay on: one ``perf_counter`` pair and a few additions).
"""
from __future__ import annotations

import bisect

ANONYMOUS = "User:ANONYMOUS"

# Upper bounds (seconds) of the request-latency histogram buckets; the last is +Inf.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Authenticator:
    """Decides, per request, whether the connection may send it; knows the principal.

    One per listener (``broker.security``): PLAINTEXT admits everything as anonymous,
    SSL names the client certificate's subject, SASL runs the login exchange first.
    """

    def connected(self, connection) -> None:
        """A connection was accepted (after the TLS handshake): set up its state."""

    def admits(self, connection, api_key: int) -> bool:
        raise NotImplementedError

    def principal(self, connection) -> str:
        raise NotImplementedError


class NoAuthentication(Authenticator):
    """A PLAINTEXT listener: every request is admitted, the principal is anonymous."""

    def admits(self, connection, api_key: int) -> bool:
        return True

    def principal(self, connection) -> str:
        return ANONYMOUS


class Authorizer:
    """Answers whether ``principal`` may perform the operations a handler declares.

    ``enabled`` is False for :class:`AllowAll`, so handlers skip per-resource work
    (authorized-operation bit sets, filtering) when no authorizer is configured.
    """

    enabled = True

    def authorize(self, ctx, acl) -> bool:
        raise NotImplementedError

    def allowed(self, principal: str, operation: str, resource_type: str, name: str, host: str = "*") -> bool:
        raise NotImplementedError

    def allowed_any(self, principal: str, operation: str, resource_type: str, host: str = "*") -> bool:
        """Kafka's ``authorizeByResourceType``: allowed on at least one resource of that type."""
        raise NotImplementedError


class AllowAll(Authorizer):
    """No authorizer configured: everything is permitted (Kafka without ``authorizer.class.name``)."""

    enabled = False

    def authorize(self, ctx, acl) -> bool:
        return True

    def allowed(self, principal: str, operation: str, resource_type: str, name: str, host: str = "*") -> bool:
        return True

    def allowed_any(self, principal: str, operation: str, resource_type: str, host: str = "*") -> bool:
        return True


class RequestMetrics:
    """Requests and handling time per API key, with a latency histogram."""

    __slots__ = ("count", "seconds", "buckets", "errors")

    def __init__(self) -> None:
        self.count = [0] * 128
        self.seconds = [0.0] * 128
        self.errors = [0] * 128  # requests whose handler raised
        self.buckets = [[0] * (len(LATENCY_BUCKETS) + 1) for _ in range(128)]

    def observe(self, api_key: int, seconds: float) -> None:
        self.count[api_key] += 1
        self.seconds[api_key] += seconds
        self.buckets[api_key][bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1

    def failed(self, api_key: int) -> None:
        self.errors[api_key] += 1
