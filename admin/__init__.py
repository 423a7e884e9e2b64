"""Operator commands for sharebroker (and any Apache Kafka 4.x cluster): ``sharebroker-share-groups``,
``sharebroker-consumer-groups``, ``sharebroker-topics``.  See ``admin/README.md``."""
