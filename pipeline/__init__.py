"""Spark pipelines on Kafka topics and share groups, in pure Python (PySpark Python data sources).

- ``format("kafka_topic")``: batch read of topics (Spark's Kafka schema), batch and streaming write.
- ``format("kafka_share")``: a Structured Streaming source over a share group, at-least-once.
- ``run_share_workers(...)``: Spark tasks as an elastic pool of share-group workers.

See ``pipeline/README.md``.
"""
from __future__ import annotations


def register(spark) -> None:
    """Register the data sources ``kafka_topic`` and ``kafka_share`` with ``spark``."""
    from pipeline.share_stream import KafkaShareDataSource
    from pipeline.topics import KafkaTopicDataSource

    spark.dataSource.register(KafkaTopicDataSource)
    spark.dataSource.register(KafkaShareDataSource)


def __getattr__(name):  # lazy: importing pipeline must not import pyspark
    if name in ("run_share_workers", "ShareRecord", "ShareWorkResult"):
        from pipeline import workers

        return getattr(workers, name)
    raise AttributeError(name)


__all__ = ["register", "run_share_workers", "ShareRecord", "ShareWorkResult"]
