"""AlterReplicaLogDirs (34) v1-2: move partitions between log directories.  There is one, the
data directory, so every partition already lives where it may go: as Kafka's
ReplicaManager.alterReplicaLogDirs answers when the destination is the current directory, moving
a partition to it is a success with nothing to do.

Per partition, in Kafka's order: a topic name too long for a future-replica directory name
(``topic-partition.<32 hex>-future`` over 255 characters) INVALID_TOPIC_EXCEPTION; a path that is
not the data directory's absolute path, as configured (no normalisation, as
LogManager.isLogDirOnline) LOG_DIR_NOT_FOUND; a partition this broker does not have
UNKNOWN_TOPIC_OR_PARTITION.  A partition named under two directories takes the last one (Kafka
builds a map).  ALTER on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED on every partition.
"""
from __future__ import annotations

from broker.dispatch import handler
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import AlterReplicaLogDirsResponse
from protocol.messages.registry import ApiKey

_T = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
_P = AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult
_FUTURE_SUFFIX = 1 + 32 + len("-future")  # ".<uuid hex>-future" after "topic-partition"


@handler(ApiKey.ALTER_REPLICA_LOG_DIRS, versions=(1, 2))
async def alter_replica_log_dirs(ctx, req):
    targets: dict[tuple[str, int], str] = {}
    for d in req.dirs:
        for t in d.topics:
            for p in t.partitions:
                targets[(t.name, p)] = d.path
    logs = ctx.components.logs
    cluster_ok = allowed_cluster(ctx, "ALTER")
    by_topic: dict[str, list] = {}
    for (topic, partition), path in targets.items():
        if not cluster_ok:
            code = Errors.CLUSTER_AUTHORIZATION_FAILED
        elif len(f"{topic}-{partition}") + _FUTURE_SUFFIX > 255:
            code = Errors.INVALID_TOPIC_EXCEPTION
        elif path != logs.data_dir:
            code = Errors.LOG_DIR_NOT_FOUND
        elif logs.get_log(topic, partition) is None:
            code = Errors.UNKNOWN_TOPIC_OR_PARTITION
        else:
            code = Errors.NONE  # already there
        by_topic.setdefault(topic, []).append(_P(partition_index=partition, error_code=code))
    return AlterReplicaLogDirsResponse(results=[_T(topic_name=t, partitions=ps) for t, ps in by_topic.items()])
