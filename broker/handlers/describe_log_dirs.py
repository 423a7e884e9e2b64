"""DescribeLogDirs (35) v1-5: the one log directory, the data directory, as Kafka's
ReplicaManager.describeLogDirs answers for each configured dir.

Its absolute path; each requested partition's size on disk (the bytes of all its segments, as
``UnifiedLog.size``) and offset lag 0 (this node leads every partition: the lag of a current
replica is ``max(high watermark - log end offset, 0)``), never a future replica; from v4 the
file system's total and usable bytes (``statvfs``: Java's getTotalSpace / getUsableSpace); v5's
``is_cordoned`` is false (nothing cordons a directory here).  A null topic list means every
partition; requested partitions this broker does not have are left out, and so is a topic with
none left.  A failed ``statvfs`` answers the directory with KAFKA_STORAGE_ERROR.  DESCRIBE on the
CLUSTER, else CLUSTER_AUTHORIZATION_FAILED as the top-level error with no directory (KafkaApis).
"""
from __future__ import annotations

import os

from broker.dispatch import handler
from broker.security.authorize import allowed_cluster
from protocol.errors import Errors
from protocol.lazy_messages import DescribeLogDirsResponse
from protocol.messages.registry import ApiKey

_D = DescribeLogDirsResponse.DescribeLogDirsResult
_T = DescribeLogDirsResponse.DescribeLogDirsTopic
_P = DescribeLogDirsResponse.DescribeLogDirsPartition


@handler(ApiKey.DESCRIBE_LOG_DIRS, versions=(1, 5))
async def describe_log_dirs(ctx, req):
    if not allowed_cluster(ctx, "DESCRIBE"):
        return DescribeLogDirsResponse(error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, results=[])
    logs = ctx.components.logs
    path = logs.data_dir
    try:
        st = os.statvfs(path)
    except OSError:
        return DescribeLogDirsResponse(results=[_D(error_code=Errors.KAFKA_STORAGE_ERROR, log_dir=path)])
    wanted = None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
    by_topic: dict[str, list] = {}
    for log in logs.all_logs():
        if wanted is None or (log.topic, log.partition) in wanted:
            by_topic.setdefault(log.topic, []).append(_P(partition_index=log.partition,
                                                         partition_size=log.size_bytes, offset_lag=0))
    topics = [_T(name=name, partitions=sorted(parts, key=lambda p: p.partition_index))
              for name, parts in sorted(by_topic.items())]
    return DescribeLogDirsResponse(results=[_D(log_dir=path, topics=topics, total_bytes=st.f_blocks * st.f_frsize,
                                               usable_bytes=st.f_bavail * st.f_frsize)])
