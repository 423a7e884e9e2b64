"""ApiVersions (18) v0-5: the served API ranges, straight from the handler table.

A request at a version we do not serve is answered by the server itself with a v0
response carrying UNSUPPORTED_VERSION and the ranges (KIP-511).  v3+ also lists
supported (below v4 only those with a minimum above 0, KAFKA-17492) and finalized features as a
Kafka 4.4 broker does (group.version finalized at 1 and
share.version at 2, the level with the share-group dead-letter queue of KIP-1191, so clients use
KIP-848 and share groups).  Client
software name/version are validated as Kafka does (INVALID_REQUEST otherwise, with no ranges, as
ApiVersionsRequest.getErrorResponse).  v5 (KIP-1242): a client naming the cluster id and node id it
means to reach gets REBOOTSTRAP_REQUIRED when they are not ours (INVALID_REQUEST when it names only
one of them).
"""
from __future__ import annotations

import re

from broker.dispatch import REGISTERED, Encoded, handler
from broker.server import api_version_entries
from protocol.errors import Errors
from protocol.lazy_messages import ApiVersionsResponse
from protocol.messages.registry import ApiKey

_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")

# name: (supported min, supported max, finalized level), as a Kafka 4.4 broker formatted at its latest
# production levels (Feature.PRODUCTION_FEATURES): metadata.version 33 is 4.4-IV2 (7 = 3.3-IV3, the
# oldest KRaft level; IV1 brings CIDR ACL host patterns, broker/security/acls.py, IV2 controller
# unregistration, handlers/unregister_controller.py); transaction.version 2 is what 4.x finalizes.
FEATURES = {
    "metadata.version": (7, 33, 33),
    "eligible.leader.replicas.version": (0, 1, 1),  # KIP-966; with one replica the ELR lists stay empty
    "kraft.version": (0, 1, 1),
    "group.version": (0, 1, 1),
    "share.version": (0, 2, 2),  # 2: share groups with the dead-letter queue (KIP-1191), as Kafka 4.4
    "transaction.version": (0, 2, 2),
    "streams.version": (0, 1, 1),  # 1: streams groups (KIP-1071), as Kafka 4.2+
}
FEATURES_EPOCH = 1

# the successful answer by version, encoded once: every client connection asks (librdkafka's share consumer
# opens three); keyed on the handlers registered, of which it lists the ranges
_ANSWERS: dict[tuple[int, int], Encoded] = {}


@handler(ApiKey.API_VERSIONS, versions=(0, 5))
async def api_versions(ctx, req):
    if ctx.api_version >= 3:
        if not all(_SOFTWARE.match(v or "") for v in (req.client_software_name, req.client_software_version)):
            return ApiVersionsResponse(error_code=Errors.INVALID_REQUEST, api_keys=[])
        if ctx.connection is not None:  # what client-metrics ``match`` patterns test (broker/client_metrics.py)
            ctx.connection.client_software = (req.client_software_name, req.client_software_version)
    if ctx.api_version >= 5 and (req.cluster_id is not None or req.node_id != -1):
        node = ctx.components.node
        if (req.cluster_id is None) != (req.node_id == -1):  # both or neither (ApiVersionsRequest.isValid)
            return ApiVersionsResponse(error_code=Errors.INVALID_REQUEST, api_keys=[])
        if req.cluster_id != node.cluster_id or req.node_id != node.node_id:  # KIP-1242
            return ApiVersionsResponse(error_code=Errors.REBOOTSTRAP_REQUIRED, api_keys=[])
    if ctx.quota is not None:  # its throttle time goes into the answer
        return answer(ctx.api_version)
    key = (ctx.api_version, REGISTERED[0])
    done = _ANSWERS.get(key)
    if done is None:
        b = bytearray()
        answer(ctx.api_version).encode_into(b, ctx.api_version)
        done = _ANSWERS[key] = Encoded(bytes(b))
    return done


def answer(version: int) -> ApiVersionsResponse:
    """The successful answer at ``version``."""
    resp = ApiVersionsResponse(api_keys=api_version_entries())
    if version >= 3:
        # below v4 a feature whose minimum is 0 is left out: older clients fail to read it (KAFKA-17492,
        # ApiVersionsResponse.maybeFilterSupportedFeatureKeys)
        resp.supported_features = [
            ApiVersionsResponse.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
            for n, (lo, hi, _) in FEATURES.items() if lo > 0 or version >= 4]
        resp.finalized_features_epoch = FEATURES_EPOCH
        resp.finalized_features = [
            ApiVersionsResponse.FinalizedFeatureKey(name=n, max_version_level=lvl, min_version_level=lvl)
            for n, (_, _, lvl) in FEATURES.items() if lvl > 0]
    return resp
