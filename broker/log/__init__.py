"""Durable partition logs: segments, indexes, retention, recovery, producer state.

See README.md in this package for the on-disk layout and design notes.
"""

from .config import TOPIC_CONFIGS, ConfigError, LogConfig, validate_topic_configs
from .errors import KAFKA_STORAGE_ERROR, OFFSET_OUT_OF_RANGE, DataDirLockedError, LogError
from .manager import LogManager, TopicInfo, new_topic_id
from .partition_log import AppendResult, BatchRef, PartitionLog

__all__ = [
    "TOPIC_CONFIGS", "ConfigError", "LogConfig", "validate_topic_configs",
    "KAFKA_STORAGE_ERROR", "OFFSET_OUT_OF_RANGE", "DataDirLockedError", "LogError",
    "LogManager", "TopicInfo", "new_topic_id",
    "AppendResult", "BatchRef", "PartitionLog",
]
