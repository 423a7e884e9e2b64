"""AlterUserScramCredentials (51) v0: upsert / delete SCRAM credentials, persisted, applied at once.

ALTER on CLUSTER or CLUSTER_AUTHORIZATION_FAILED for every user.  Validated as
Kafka's ScramControlManager: a user altered twice in one request DUPLICATE_RESOURCE,
an empty name UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM,
iterations outside 4096-16384 UNACCEPTABLE_CREDENTIAL ("Too few/many iterations"),
deleting what does not exist RESOURCE_NOT_FOUND.  The client sends the salted
password; the broker keeps only the keys derived from it (``broker.security.scram``).
One result per user, in request order.
"""
from __future__ import annotations

from collections import Counter

from broker.dispatch import handler
from broker.security.authorize import allowed_cluster
from broker.security.scram import BY_TYPE, MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted
from protocol.errors import Errors
from protocol.lazy_messages import AlterUserScramCredentialsResponse as Resp
from protocol.messages.registry import ApiKey

_R = Resp.AlterUserScramCredentialsResult


def _check(name: str, mechanism: int) -> tuple[int, str | None]:
    if not name:
        return Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in BY_TYPE:
        return Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return Errors.NONE, None


@handler(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, versions=(0, 0))
async def alter_user_scram_credentials(ctx, req):
    ops = [("delete", d) for d in req.deletions] + [("upsert", u) for u in req.upsertions]
    users = list(dict.fromkeys(op.name for _, op in ops))
    if not allowed_cluster(ctx, "ALTER"):
        return Resp(results=[_R(user=u, error_code=Errors.CLUSTER_AUTHORIZATION_FAILED) for u in users])
    store = ctx.components.security.scram
    counts = Counter(op.name for _, op in ops)
    errors: dict[str, tuple[int, str | None]] = {}
    changes = []
    for kind, op in ops:
        name = op.name
        if counts[name] > 1:
            errors[name] = (Errors.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
            continue
        code, message = _check(name, op.mechanism)
        if not code and kind == "upsert":
            if op.iterations < MIN_ITERATIONS:
                code, message = Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
            elif op.iterations > MAX_ITERATIONS:
                code, message = Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
            elif not op.salt or not op.salted_password:
                code, message = Errors.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
        if not code and kind == "delete" and store.get(name, BY_TYPE[op.mechanism]) is None:
            code, message = Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        if code:
            errors[name] = (code, message)
        else:
            changes.append((kind, op))
    for kind, op in changes:
        mech = BY_TYPE[op.mechanism]
        if kind == "delete":
            store.delete(op.name, mech)
        else:
            store.put(op.name, mech, credential_from_salted(mech, bytes(op.salted_password), bytes(op.salt),
                                                            op.iterations))
    if changes:
        store.save()
    return Resp(results=[_R(user=u, error_code=errors.get(u, (0, None))[0], error_message=errors.get(u, (0, None))[1])
                         for u in users])
