"""DescribeDelegationToken (41) v1-3: the tokens the caller may see, optionally of some owners only.

As KafkaApis ``handleDescribeTokensRequest`` and ``DelegationTokenManager.filterToken``:
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (PLAINTEXT, anonymous SSL or a token session), then
DELEGATION_TOKEN_AUTH_DISABLED without a secret key; an empty owner list answers no tokens, a
null one every token.  A token is listed when an owner filter (if any) names its owner or a
renewer, and the caller is its owner or a renewer, or has DESCRIBE on the DELEGATION_TOKEN
resource (its id), or DESCRIBE_TOKENS on the USER resource of its owner.  v3 adds the requester.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed
from broker.security.tokens import requests_allowed, split_principal
from protocol.errors import Errors
from protocol.lazy_messages import DescribeDelegationTokenResponse as Resp
from protocol.messages.registry import ApiKey

_Token = Resp.DescribedDelegationToken
_Renewer = Resp.DescribedDelegationTokenRenewer


def _described(tokens, t):
    otype, oname = split_principal(t.owner)
    rtype, rname = split_principal(t.requester)
    return _Token(principal_type=otype, principal_name=oname, token_requester_principal_type=rtype,
                  token_requester_principal_name=rname, issue_timestamp=t.issue_ms, expiry_timestamp=t.expiry_ms,
                  max_timestamp=t.max_ms, token_id=t.token_id, hmac=tokens.hmac(t.token_id),
                  renewers=[_Renewer(principal_type=p, principal_name=n)
                            for p, n in map(split_principal, t.renewers)])


@handler(ApiKey.DESCRIBE_DELEGATION_TOKEN, versions=(1, 3))
async def describe_delegation_token(ctx, req):
    if not requests_allowed(ctx):
        return Resp(error_code=Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, tokens=[])
    tokens = ctx.components.security.tokens
    if not tokens.enabled:
        return Resp(error_code=Errors.DELEGATION_TOKEN_AUTH_DISABLED, tokens=[])
    if req.owners is not None and not req.owners:
        return Resp(tokens=[])
    owners = None if req.owners is None else [f"{o.principal_type}:{o.principal_name}" for o in req.owners]
    visible = tokens.visible(ctx.principal, owners,
                             lambda token_id: allowed(ctx, "DESCRIBE", "DELEGATION_TOKEN", token_id),
                             lambda owner: allowed(ctx, "DESCRIBE_TOKENS", "USER", owner))
    return Resp(tokens=[_described(tokens, t) for t in visible])
