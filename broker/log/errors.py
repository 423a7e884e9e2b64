"""Errors raised by the log layer, each carrying a Kafka error code."""

from protocol.errors import KafkaError

OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
KAFKA_STORAGE_ERROR = 56


class LogError(KafkaError):
    """A log operation failed; ``code`` is the Kafka error code to answer with.

    A ``KafkaError``, so that the coordinators, which append to internal topics through the log,
    map a failed append as Kafka does (e.g. KAFKA_STORAGE_ERROR -> NOT_COORDINATOR) instead of
    taking it for an unknown failure."""

    def __init__(self, code: int, message: str = ""):
        Exception.__init__(self, message or f"error code {code}")
        self.code = code
        self.message = message


class DataDirLockedError(RuntimeError):
    """The data directory is locked by another running broker process."""
