"""StreamsGroupTopologyDescriptionUpdate (93) v0: Kafka 4.4 stores pushed topology descriptions only through a
configured topology description plugin; without one (Kafka's default, and always here) GroupCoordinatorService
answers UNSUPPORTED_VERSION "The broker has no streams group topology description plugin configured." after
READ on the group (GROUP_AUTHORIZATION_FAILED), as KafkaApis.handleStreamsGroupTopologyDescriptionUpdate.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed, enabled
from protocol.errors import Errors
from protocol.lazy_messages import StreamsGroupTopologyDescriptionUpdateResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, versions=(0, 0))
async def streams_group_topology_description_update(ctx, req):
    if enabled(ctx) and not allowed(ctx, "READ", "GROUP", req.group_id):
        return StreamsGroupTopologyDescriptionUpdateResponse(error_code=Errors.GROUP_AUTHORIZATION_FAILED)
    return StreamsGroupTopologyDescriptionUpdateResponse(
        error_code=Errors.UNSUPPORTED_VERSION,
        error_message="The broker has no streams group topology description plugin configured.")
