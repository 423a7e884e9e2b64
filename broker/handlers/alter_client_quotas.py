"""AlterClientQuotas (49) v0-1: set or remove quota values of user / client-id / ip entities.

ALTER_CONFIGS on CLUSTER, else CLUSTER_AUTHORIZATION_FAILED for every entry (Kafka's controller).
Validated as ``ClientQuotaControlManager``, one result per entity, INVALID_REQUEST with Kafka's
messages for: an empty entity, an unknown entity type, an empty name, ``ip`` combined with another
type, an ``ip`` name that is neither an address nor a resolvable host, an unknown key (keys of
``user`` / ``client-id``: producer_byte_rate, consumer_byte_rate, request_percentage,
controller_mutation_rate; of ``ip``: connection_creation_rate), a value not above 0, a fraction or
an out-of-range value for the integral keys, an entity or key given twice ("Ignoring duplicate
entity ...").  A null entity name is the ``<default>`` entity.  Removing a key that is not set
is not an error.  ``ValidateOnly`` answers without changing anything; otherwise the accepted
entities are applied at once (the next request is counted under the new quotas) and saved.
"""
from __future__ import annotations

import asyncio
import ipaddress
import logging

from broker.dispatch import handler
from broker.quotas.store import IP
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import AlterClientQuotasResponse as Resp
from protocol.messages.registry import ApiKey

log = logging.getLogger("sharebroker.quotas")


def _entry(pairs, code: int, message: str | None):
    return Resp.EntryData(error_code=code, error_message=message,
                          entity=[Resp.EntityData(entity_type=t, entity_name=n) for t, n in pairs])


async def _resolvable(names: set) -> set:
    """The ``ip`` entity names that are addresses or resolve (``InetAddress.getByName``)."""
    ok = set()
    loop = asyncio.get_running_loop()
    for name in names:
        try:
            ipaddress.ip_address(name)
            ok.add(name)
            continue
        except ValueError:
            pass
        try:
            await loop.getaddrinfo(name, None)
            ok.add(name)
        except (OSError, UnicodeError):
            pass
    return ok


@handler(ApiKey.ALTER_CLIENT_QUOTAS, versions=(0, 1))
async def alter_client_quotas(ctx, req):
    if not allowed_cluster(ctx, "ALTER_CONFIGS"):
        return Resp(entries=[_entry([(e.entity_type, e.entity_name) for e in entry.entity],
                                    Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
                             for entry in req.entries])
    ips = {e.entity_name for entry in req.entries for e in entry.entity
           if e.entity_type == IP and e.entity_name}
    valid_ips = await _resolvable(ips) if ips else set()
    store = ctx.components.quotas.store
    decided = store.alter(req.entries, ip_valid=valid_ips.__contains__)
    if not req.validate_only and decided.records:
        try:
            store.replay(decided.records)
        except OSError as e:  # not saved, so not applied: the entries that would have changed fail
            log.error("client quotas not saved: %s", e)
            return Resp(entries=[_entry(pairs, code or Errors.UNKNOWN_SERVER_ERROR,
                                        message if code else f"The client quotas could not be saved: {e}")
                                 for pairs, code, message in decided.results])
    return Resp(entries=[_entry(pairs, code, message) for pairs, code, message in decided.results])
