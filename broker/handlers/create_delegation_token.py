"""CreateDelegationToken (38) v1-3: a delegation token for the caller or, with CREATE_TOKENS, another user.

As KafkaApis / ControllerApis ``handleCreateDelegationTokenRequest`` and
``DelegationTokenControlManager.createDelegationToken`` (``broker.security.tokens``): over
PLAINTEXT, SSL without a client certificate or a token session DELEGATION_TOKEN_REQUEST_NOT_ALLOWED;
an owner other than the caller (v3 ``OwnerPrincipalName``) needs CREATE_TOKENS on the USER
resource ``User:owner`` (else DELEGATION_TOKEN_AUTHORIZATION_FAILED); a renewer that is not a
``User`` INVALID_PRINCIPAL_TYPE (these three with -1 timestamps, as ``prepareResponse``); no
``delegation.token.secret.key`` DELEGATION_TOKEN_AUTH_DISABLED.  The lifetime is
``min(MaxLifetimeMs, delegation.token.max.lifetime.ms)`` (a value <= 0: the setting), the first
expiry ``delegation.token.expiry.time.ms`` from now (not past the max).  The answer carries the
token id and its HMAC (the SCRAM password); v3 adds the requester.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed
from broker.security.tokens import requests_allowed, split_principal
from protocol.errors import Errors
from protocol.lazy_messages import CreateDelegationTokenResponse as Resp
from protocol.messages.registry import ApiKey


def _answer(code: int, owner: str, requester: str, token=None, hmac: bytes = b"", stamp: int = -1):
    otype, oname = split_principal(owner)
    rtype, rname = split_principal(requester)
    return Resp(error_code=code, principal_type=otype, principal_name=oname, token_requester_principal_type=rtype,
                token_requester_principal_name=rname,
                issue_timestamp_ms=token.issue_ms if token else stamp,
                expiry_timestamp_ms=token.expiry_ms if token else stamp,
                max_timestamp_ms=token.max_ms if token else stamp,
                token_id=token.token_id if token else "", hmac=hmac)


@handler(ApiKey.CREATE_DELEGATION_TOKEN, versions=(1, 3))
async def create_delegation_token(ctx, req):
    requester = ctx.principal
    owner = requester
    if req.owner_principal_name:
        owner = f"{req.owner_principal_type or 'User'}:{req.owner_principal_name}"
    if not requests_allowed(ctx):
        return _answer(Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, owner, requester)
    if owner != requester and not allowed(ctx, "CREATE_TOKENS", "USER", owner):
        return _answer(Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner, requester)
    if any(r.principal_type != "User" for r in req.renewers):
        return _answer(Errors.INVALID_PRINCIPAL_TYPE, owner, requester)
    renewers = [f"{r.principal_type}:{r.principal_name}" for r in req.renewers]
    code, token, hmac = ctx.components.security.tokens.create(requester, owner, renewers, req.max_lifetime_ms)
    return _answer(code, owner, requester, token, hmac, stamp=0)
