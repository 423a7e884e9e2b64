"""RenewDelegationToken (39) v1-2: move a token's expiry, by its owner or a renewer.

As ``DelegationTokenControlManager.renewDelegationToken`` (``broker.security.tokens``): the new
expiry is now + ``min(RenewPeriodMs, delegation.token.expiry.time.ms)`` (a period <= 0: the
setting), never past the token's max timestamp.  Errors: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
(PLAINTEXT, anonymous SSL or a token session; expiry -1), DELEGATION_TOKEN_AUTH_DISABLED,
DELEGATION_TOKEN_NOT_FOUND (unknown HMAC), DELEGATION_TOKEN_EXPIRED,
DELEGATION_TOKEN_OWNER_MISMATCH (neither owner nor renewer), KAFKA_STORAGE_ERROR (not written).
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.tokens import ERROR_TIMESTAMP, requests_allowed
from protocol.errors import Errors
from protocol.lazy_messages import RenewDelegationTokenResponse as Resp
from protocol.messages.registry import ApiKey


@handler(ApiKey.RENEW_DELEGATION_TOKEN, versions=(1, 2))
async def renew_delegation_token(ctx, req):
    if not requests_allowed(ctx):
        return Resp(error_code=Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, expiry_timestamp_ms=ERROR_TIMESTAMP)
    code, expiry = ctx.components.security.tokens.renew(ctx.principal, req.hmac, req.renew_period_ms)
    return Resp(error_code=code, expiry_timestamp_ms=expiry)
