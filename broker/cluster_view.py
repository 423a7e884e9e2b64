"""The coordinators' view of topics and logs (coordinator.group.cluster.Cluster) over the LogManager."""
from __future__ import annotations


class ClusterView:
    def __init__(self, logs):
        self._logs = logs

    def topic_id(self, name: str) -> bytes | None:
        info = self._logs.topic(name)
        return info.topic_id.bytes if info is not None else None

    def topic_name(self, topic_id: bytes) -> str | None:
        info = self._logs.topic_by_id(topic_id)
        return info.name if info is not None else None

    def partition_count(self, name: str) -> int | None:
        info = self._logs.topic(name)
        return info.partitions if info is not None else None

    def topic_names(self):
        return [n for n in self._logs.topics if not n.startswith("__")]

    def log_end_offset(self, name: str, partition: int) -> int:
        log = self._logs.get_log(name, partition)
        return log.log_end_offset if log is not None else 0

    def log_start_offset(self, name: str, partition: int) -> int:
        log = self._logs.get_log(name, partition)
        return log.log_start_offset if log is not None else 0
