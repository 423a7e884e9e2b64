"""SaslAuthenticate (36) v0-2: one token of the SASL exchange (``broker.security.sasl``).

v1+ carry the session lifetime (``connections.max.reauth.ms``, KIP-368).  A failed
login is SASL_AUTHENTICATION_FAILED with Kafka's message, and the connection closes
after this response.  Outside an exchange (a PLAINTEXT or SSL listener, or after
authentication) it is ILLEGAL_SASL_STATE, as Kafka answers.
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.errors import Errors
from protocol.messages.registry import ApiKey
from protocol.lazy_messages import SaslAuthenticateResponse


@handler(ApiKey.SASL_AUTHENTICATE, versions=(0, 2))
async def sasl_authenticate(ctx, req):
    conn = ctx.connection
    authenticate = getattr(conn.authenticator, "authenticate", None)
    if authenticate is None:
        return SaslAuthenticateResponse(error_code=Errors.ILLEGAL_SASL_STATE,
                                        error_message="Unexpected SASL request on a listener without SASL")
    code, message, token, lifetime = authenticate(conn, req.auth_bytes)
    return SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=token,
                                    session_lifetime_ms=lifetime)
