"""Errors raised by the log layer, each carrying a Kafka error code."""

OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
KAFKA_STORAGE_ERROR = 56


class LogError(Exception):
    """A log operation failed; ``code`` is the Kafka error code to answer with."""

    def __init__(self, code: int, message: str = ""):
        super().__init__(message or f"error code {code}")
        self.code = code
        self.message = message


class DataDirLockedError(RuntimeError):
    """The data directory is locked by another running broker process."""


class DataDirFormatError(RuntimeError):
    """The data directory was written in a format, or for a node or cluster, this broker must not open."""
