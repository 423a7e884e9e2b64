"""SaslHandshake (17) v0-1: choose the SASL mechanism (``broker.security.sasl``).

On a SASL listener the listener's authenticator answers: the enabled mechanisms, and
UNSUPPORTED_SASL_MECHANISM (then the close) for any other; v0 starts the legacy
exchange of raw tokens, v1 the SaslAuthenticate one.  On an authenticated connection
it starts a re-authentication when ``connections.max.reauth.ms`` is set.  Anywhere
else (a PLAINTEXT or SSL listener, or no re-authentication) it is ILLEGAL_SASL_STATE,
as Kafka's KafkaApis answers.
"""
from __future__ import annotations

from broker.dispatch import handler
from protocol.errors import Errors
from protocol.messages.registry import ApiKey
from protocol.lazy_messages import SaslHandshakeResponse


@handler(ApiKey.SASL_HANDSHAKE, versions=(0, 1))
async def sasl_handshake(ctx, req):
    conn = ctx.connection
    handshake = getattr(conn.authenticator, "handshake", None)
    if handshake is None:
        return SaslHandshakeResponse(error_code=Errors.ILLEGAL_SASL_STATE, mechanisms=[])
    code, mechanisms = handshake(conn, req.mechanism, ctx.api_version)
    return SaslHandshakeResponse(error_code=code, mechanisms=list(mechanisms))
