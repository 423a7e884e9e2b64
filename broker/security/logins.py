"""Login outcomes: a failed login's exception, and the login counts since start-up per listener and
SASL mechanism, read by ``/metrics`` and the status page.

The counters are written by ``sasl.SaslAuthenticator`` on the event loop only.  A failure's cause is a short word:
``credentials`` (PLAIN / SCRAM), ``unsupported_mechanism``, ``principal_change`` (a re-authentication
as another principal), ``malformed``, and for OAUTHBEARER the token check that refused it
(``expired``, ``audience``, ``issuer``, ``unknown_key``, ``signature``, ``algorithm``, ``claim``,
``scope``, ``authzid``, ``invalid``).
"""
from __future__ import annotations

from collections import Counter

# (listener, mechanism, "authentication" | "reauthentication") -> successful logins
SUCCEEDED: Counter = Counter()
# (listener, mechanism, cause) -> failed logins
FAILED: Counter = Counter()


class AuthenticationFailed(Exception):
    """Kafka's SaslAuthenticationException: the message goes to the client as it is."""
