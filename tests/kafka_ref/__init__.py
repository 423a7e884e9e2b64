"""The reference Apache Kafka 4.4.0 (launcher: ``launcher.py``; CLI: ``python -m tests.kafka_ref``)."""
from tests.kafka_ref.launcher import KafkaRef, KafkaRefError, classpath, missing_tools

__all__ = ["KafkaRef", "KafkaRefError", "classpath", "missing_tools"]
