"""ExpireDelegationToken (40) v1-2: bring a token's expiry forward, or (a negative period) remove it now.

As ``DelegationTokenControlManager.expireDelegationToken`` (``broker.security.tokens``), by the
owner or a renewer: ``ExpiryTimePeriodMs`` < 0 removes the token at once (the answer's expiry is
now); otherwise the expiry becomes now + the period, never past the max timestamp.  Errors:
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (PLAINTEXT, anonymous SSL or a token session; expiry -1),
DELEGATION_TOKEN_AUTH_DISABLED, DELEGATION_TOKEN_NOT_FOUND, DELEGATION_TOKEN_OWNER_MISMATCH,
DELEGATION_TOKEN_EXPIRED (a non-negative period on an expired token), KAFKA_STORAGE_ERROR.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.tokens import ERROR_TIMESTAMP, requests_allowed
from protocol.errors import Errors
from protocol.lazy_messages import ExpireDelegationTokenResponse as Resp
from protocol.messages.registry import ApiKey


@handler(ApiKey.EXPIRE_DELEGATION_TOKEN, versions=(1, 2))
async def expire_delegation_token(ctx, req):
    if not requests_allowed(ctx):
        return Resp(error_code=Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, expiry_timestamp_ms=ERROR_TIMESTAMP)
    code, expiry = ctx.components.security.tokens.expire(ctx.principal, req.hmac, req.expiry_time_period_ms)
    return Resp(error_code=code, expiry_timestamp_ms=expiry)
