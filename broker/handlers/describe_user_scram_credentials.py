"""DescribeUserScramCredentials (50) v0: users' SCRAM mechanisms and iteration counts (never salts or keys).

DESCRIBE on CLUSTER or CLUSTER_AUTHORIZATION_FAILED; no users (null or empty) lists
everyone; a user listed twice is DUPLICATE_RESOURCE, an unknown one RESOURCE_NOT_FOUND
(Kafka's ScramCache messages).
"""
from __future__ import annotations

from collections import Counter

from broker.dispatch import handler
from broker.security.authorize import allowed_cluster
from broker.security.scram import MECHANISMS
from protocol.errors import Errors
from protocol.lazy_messages import DescribeUserScramCredentialsResponse as Resp
from protocol.messages.registry import ApiKey


def _result(store, user: str):
    infos = [Resp.CredentialInfo(mechanism=MECHANISMS[m][0], iterations=c.iterations)
             for m, c in sorted(store.users.get(user, {}).items())]
    return Resp.DescribeUserScramCredentialsResult(user=user, credential_infos=infos)


@handler(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, versions=(0, 0))
async def describe_user_scram_credentials(ctx, req):
    if not allowed_cluster(ctx, "DESCRIBE"):
        return Resp(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, results=[])
    store = ctx.components.security.scram
    if not req.users:
        return Resp(results=[_result(store, u) for u in sorted(store.users)])
    counts = Counter(u.name for u in req.users)
    out, seen = [], set()
    for u in req.users:
        name = u.name
        if name in seen:
            continue
        seen.add(name)
        if counts[name] > 1:
            out.append(Resp.DescribeUserScramCredentialsResult(
                user=name, error_code=Errors.DUPLICATE_RESOURCE, credential_infos=[],
                error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"))
        elif name not in store.users:
            out.append(Resp.DescribeUserScramCredentialsResult(
                user=name, error_code=Errors.RESOURCE_NOT_FOUND, credential_infos=[],
                error_message=f"Attempt to describe a user credential that does not exist: {name}"))
        else:
            out.append(_result(store, name))
    return Resp(results=out)
