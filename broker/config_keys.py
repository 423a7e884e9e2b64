"""Every broker setting we know, with Kafka's type and valid range: checked once at start-up.

``validate(config)`` runs before the data directory is touched.  An invalid value of a
known key is refused with Kafka's own words (``Invalid value abc for configuration
num.partitions: Not a number of type INT``); an unknown key is returned so start-up
can log Kafka's warning (``The configuration 'foo.bar' was supplied but isn't a known
config.``) and go on, as Kafka does.

Three kinds of key are known:
- the keys this broker reads (``BROKER_KEYS`` below, plus the broker-level synonyms of
  topic configs, checked with the topic config's own definition);
- Kafka settings that a one-node broker accepts and has no use for (``ACCEPTED_KEYS``:
  replication, controller quorum, thread counts...), so a Kafka ``server.properties``
  starts here without a warning;
- the ``sharebroker.`` settings of our own.
Component-level relations between keys (min <= default <= max of the share-group
bounds) are checked by the components that own them.
"""
from __future__ import annotations

import re

from broker.log.config import (BOOLEAN, CLASS, DOUBLE, INT, LIST, LONG, PASSWORD, STRING, TOPIC_CONFIGS,
                               ConfigDef, ConfigError)

INT_MAX = (1 << 31) - 1

# Kafka's own messages for values that do not parse (org.apache.kafka.common.config.ConfigDef.parseType).
_TYPE_MESSAGES = {INT: "Not a number of type INT", LONG: "Not a number of type LONG",
                  BOOLEAN: "Expected value to be either true or false", DOUBLE: "Not a number of type DOUBLE"}


def _k(name: str, type_: int, minimum=None, maximum=None, choices=None) -> tuple[str, ConfigDef]:
    return name, ConfigDef(name, type_, None, minimum=minimum, maximum=maximum, choices=choices)


BROKER_KEYS: dict[str, ConfigDef] = dict([
    _k("node.id", INT, minimum=0),
    _k("listeners", LIST),
    _k("advertised.listeners", LIST),
    _k("log.dirs", LIST),
    _k("log.dir", STRING),
    _k("num.partitions", INT, minimum=1),
    _k("max.request.partition.size.limit", INT, minimum=1),  # DescribeTopicPartitions' page size cap
    _k("default.replication.factor", INT, minimum=1),
    _k("auto.create.topics.enable", BOOLEAN),
    _k("delete.topic.enable", BOOLEAN),
    _k("socket.request.max.bytes", INT, minimum=1),
    _k("max.connections", INT, minimum=0),
    _k("max.connections.per.ip", INT, minimum=0),
    _k("max.connections.per.ip.overrides", STRING),
    _k("connections.max.idle.ms", LONG),
    _k("queued.max.request.bytes", LONG),
    _k("sharebroker.request.read.timeout.ms", LONG, minimum=1),  # a started request must progress
    # when an acknowledgement means "on disk" (README "Durability"): fsync (the default) or page-cache (Kafka's)
    _k("sharebroker.durability", STRING, choices=("fsync", "page-cache")),
    _k("sharebroker.log.max.open.files", INT, minimum=1),  # broker/log/faults.py OpenFiles (default: half the limit)
    # false: no syncfs(2) of the data directory's file system (merged syncs, clean shutdown), each file its own fsync
    _k("sharebroker.log.syncfs.enable", BOOLEAN),
    _k("log.retention.check.interval.ms", LONG, minimum=1),
    _k("log.retention.minutes", INT),
    _k("log.retention.hours", INT),
    _k("log.roll.hours", INT, minimum=1),
    _k("max.incremental.fetch.session.cache.slots", INT, minimum=0),
    _k("producer.id.expiration.ms", INT, minimum=1),
    _k("producer.id.expiration.check.interval.ms", INT, minimum=1),
    # the log cleaner (broker/log/cleaner; the topic-level log.cleaner.* defaults are synonyms below)
    _k("log.cleaner.enable", BOOLEAN),
    _k("log.cleaner.threads", INT, minimum=0),
    _k("log.cleaner.dedupe.buffer.size", LONG),
    _k("log.cleaner.io.buffer.size", INT, minimum=0),
    _k("log.cleaner.io.buffer.load.factor", DOUBLE),
    _k("log.cleaner.io.max.bytes.per.second", DOUBLE),
    _k("log.cleaner.backoff.ms", LONG, minimum=0),
    _k("sharebroker.log.cleaner.test.crash.phase", STRING,
       choices=("", "writing", "cleaned", "swap", "deleted", "done", "checkpoint")),  # test-only
    # internal topics' segments (broker/topics.py)
    _k("offsets.topic.segment.bytes", INT, minimum=1),
    _k("transaction.state.log.segment.bytes", INT, minimum=1),
    _k("share.coordinator.state.topic.segment.bytes", INT, minimum=1),
    # transactions (broker.transactions)
    _k("transaction.max.timeout.ms", INT, minimum=1),
    _k("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, minimum=1),
    _k("transactional.id.expiration.ms", INT, minimum=1),
    _k("transaction.remove.expired.transaction.cleanup.interval.ms", INT, minimum=1),
    _k("transaction.partition.verification.enable", BOOLEAN),
    # classic and consumer groups, offsets
    _k("group.initial.rebalance.delay.ms", INT, minimum=0),
    _k("group.min.session.timeout.ms", INT, minimum=0),
    _k("group.max.session.timeout.ms", INT, minimum=0),
    _k("group.max.size", INT, minimum=1),
    _k("group.consumer.session.timeout.ms", INT, minimum=1),
    _k("group.consumer.min.session.timeout.ms", INT, minimum=1),
    _k("group.consumer.max.session.timeout.ms", INT, minimum=1),
    _k("group.consumer.heartbeat.interval.ms", INT, minimum=1),
    _k("group.consumer.min.heartbeat.interval.ms", INT, minimum=1),
    _k("group.consumer.max.heartbeat.interval.ms", INT, minimum=1),
    _k("group.consumer.max.size", INT, minimum=1),
    _k("group.consumer.assignors", LIST),
    _k("group.consumer.assignment.interval.ms", INT, minimum=0),
    _k("group.consumer.min.assignment.interval.ms", INT, minimum=0),
    _k("group.consumer.max.assignment.interval.ms", INT, minimum=0),
    _k("group.consumer.assignor.offload.enable", BOOLEAN),
    _k("group.consumer.lag.offset.reset", STRING, choices=("latest", "earliest", "none")),
    _k("offsets.retention.minutes", INT, minimum=1),
    _k("offsets.retention.check.interval.ms", LONG, minimum=1),
    _k("offset.metadata.max.bytes", INT, minimum=0),
    # streams groups (KIP-1071)
    _k("group.streams.session.timeout.ms", INT, minimum=1),
    _k("group.streams.min.session.timeout.ms", INT, minimum=1),
    _k("group.streams.max.session.timeout.ms", INT, minimum=1),
    _k("group.streams.heartbeat.interval.ms", INT, minimum=1),
    _k("group.streams.min.heartbeat.interval.ms", INT, minimum=1),
    _k("group.streams.max.heartbeat.interval.ms", INT, minimum=1),
    _k("group.streams.max.size", INT, minimum=1),
    _k("group.streams.num.standby.replicas", INT, minimum=0),
    _k("group.streams.max.standby.replicas", INT, minimum=0),
    _k("group.streams.task.offset.interval.ms", INT, minimum=1),
    _k("group.streams.initial.rebalance.delay.ms", INT, minimum=0),
    _k("group.streams.assignment.interval.ms", INT, minimum=0),
    _k("group.streams.min.assignment.interval.ms", INT, minimum=0),
    _k("group.streams.max.assignment.interval.ms", INT, minimum=0),
    # share groups and the share coordinator
    _k("group.share.session.timeout.ms", INT, minimum=1),
    _k("group.share.min.session.timeout.ms", INT, minimum=1),
    _k("group.share.max.session.timeout.ms", INT, minimum=1),
    _k("group.share.heartbeat.interval.ms", INT, minimum=1),
    _k("group.share.min.heartbeat.interval.ms", INT, minimum=1),
    _k("group.share.max.heartbeat.interval.ms", INT, minimum=1),
    _k("group.share.record.lock.duration.ms", INT, minimum=1000),
    _k("group.share.min.record.lock.duration.ms", INT, minimum=1000),
    _k("group.share.max.record.lock.duration.ms", INT, minimum=1000),
    _k("group.share.delivery.count.limit", INT, minimum=2, maximum=10),
    _k("group.share.min.delivery.count.limit", INT, minimum=2),
    _k("group.share.max.delivery.count.limit", INT, minimum=2),
    _k("group.share.partition.max.record.locks", INT, minimum=1),
    _k("group.share.min.partition.max.record.locks", INT, minimum=1),
    _k("group.share.max.partition.max.record.locks", INT, minimum=1),
    _k("group.share.renew.acknowledge.enable", BOOLEAN),
    _k("group.share.assignment.interval.ms", INT, minimum=0),
    _k("group.share.min.assignment.interval.ms", INT, minimum=0),
    _k("group.share.max.assignment.interval.ms", INT, minimum=0),
    _k("group.share.assignor.offload.enable", BOOLEAN),
    _k("group.share.assignors", LIST),
    _k("group.share.lag.rebalance.interval.ms", INT, minimum=0),  # ours: the share `lag` assignor
    _k("group.share.initial.assignment.delay.ms", INT, minimum=0),  # ours: coordinator/group/share.py
    _k("group.share.fair.acquisition.enable", BOOLEAN),  # ours: broker/share/fair.py
    _k("group.share.max.size", INT, minimum=1, maximum=1000),
    _k("group.share.max.share.sessions", INT, minimum=1),
    _k("share.coordinator.snapshot.update.records.per.snapshot", INT, minimum=0, maximum=500),
    _k("share.coordinator.cold.partition.snapshot.interval.ms", INT, minimum=1),
    # KIP-1191 share-group dead-letter queue (broker/share/dlq.py)
    _k("errors.deadletterqueue.auto.create.topics.enable", BOOLEAN),
    _k("errors.deadletterqueue.topic.name.prefix", STRING),
    # client quotas (broker/quotas)
    _k("quota.window.num", INT, minimum=1),
    _k("telemetry.max.bytes", INT, minimum=1),  # KIP-714 (broker/client_metrics.py)
    _k("quota.window.size.seconds", INT, minimum=1),
    _k("controller.quota.window.num", INT, minimum=1),
    _k("controller.quota.window.size.seconds", INT, minimum=1),
    _k("client.quota.callback.class", CLASS),
    # ours (documented in the README)
    _k("offsets.retention.ms", LONG, minimum=1),
    _k("sharebroker.share.session.idle.timeout.ms", LONG, minimum=1),
    _k("sharebroker.share.dlq.retry.backoff.ms", LONG, minimum=1),      # Kafka's 1 s (not configurable there)
    _k("sharebroker.share.dlq.retry.backoff.max.ms", LONG, minimum=1),  # Kafka's 30 s
    _k("sharebroker.share.dlq.test.append.delay.ms", LONG, minimum=0),  # test-only: hold each DLQ append
    _k("sharebroker.coordinator.test.load.hold.file", STRING),  # test-only: coordinators load once it is gone
    _k("sharebroker.metrics.listener", STRING),
    _k("sharebroker.status.lag.sample.ms", LONG, minimum=10),  # the status page's lag sparkline interval
    _k("sharebroker.loop.stall.log.ms", LONG, minimum=0),  # broker/loop_watch.py: log event-loop stalls (0: off)
    # security (broker/security/README.md): Kafka's keys and types; listener.name.<l>.<key> overrides
    # of these are checked with the same definition
    _k("listener.security.protocol.map", STRING),
    _k("sasl.enabled.mechanisms", LIST),
    _k("sasl.jaas.config", PASSWORD),
    _k("sasl.mechanism.inter.broker.protocol", STRING),
    _k("sasl.server.max.receive.size", INT),
    _k("security.inter.broker.protocol", STRING, choices=("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")),
    _k("connections.max.reauth.ms", LONG),
    _k("connection.failed.authentication.delay.ms", INT, minimum=0),
    _k("principal.builder.class", CLASS),
    _k("sasl.kerberos.service.name", STRING),  # broker/security/kerberos.py (GSSAPI)
    _k("sasl.kerberos.principal.to.local.rules", LIST),
    _k("ssl.keystore.type", STRING),
    _k("ssl.keystore.location", STRING),
    _k("ssl.keystore.password", PASSWORD),
    _k("ssl.keystore.key", PASSWORD),
    _k("ssl.keystore.certificate.chain", PASSWORD),
    _k("ssl.key.password", PASSWORD),
    _k("ssl.truststore.type", STRING),
    _k("ssl.truststore.location", STRING),
    _k("ssl.truststore.password", PASSWORD),
    _k("ssl.truststore.certificates", PASSWORD),
    _k("ssl.client.auth", STRING, choices=("required", "requested", "none")),
    _k("ssl.enabled.protocols", LIST),
    _k("ssl.protocol", STRING),
    _k("ssl.cipher.suites", LIST),
    _k("ssl.endpoint.identification.algorithm", STRING),
    _k("ssl.principal.mapping.rules", STRING),
    _k("authorizer.class.name", STRING),
    _k("super.users", STRING),
    _k("allow.everyone.if.no.acl.found", BOOLEAN),
    _k("sharebroker.scram.users", PASSWORD),
    _k("delegation.token.secret.key", PASSWORD),  # broker/security/tokens.py
    _k("delegation.token.max.lifetime.ms", LONG, minimum=1),
    _k("delegation.token.expiry.time.ms", LONG, minimum=1),
    _k("delegation.token.expiry.check.interval.ms", LONG, minimum=1),
])

# Kafka settings that have no meaning on one node; accepted so a Kafka server.properties works.
ACCEPTED_KEYS = frozenset({
    "process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
    "controller.listener.names", "inter.broker.listener.name",
    "num.network.threads", "num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "queued.max.requests",
    "offsets.topic.replication.factor", "offsets.topic.num.partitions",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
    "share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr",
    "share.coordinator.state.topic.num.partitions",
    "group.coordinator.rebalance.protocols", "unstable.api.versions.enable", "unstable.feature.versions.enable",
    "metadata.log.dir", "broker.id", "broker.rack", "replica.lag.time.max.ms", "auto.leader.rebalance.enable",
    "log.flush.scheduler.interval.ms", "log.flush.offset.checkpoint.interval.ms",
    "share.coordinator.threads", "group.coordinator.threads", "background.threads",
    "replication.quota.window.num", "replication.quota.window.size.seconds",
    "alter.log.dirs.replication.quota.window.num", "alter.log.dirs.replication.quota.window.size.seconds",
})

_SYNONYMS = {c.synonym: c for c in TOPIC_CONFIGS.values() if c.synonym}


def _listener_check(key: str, value: str) -> None:
    from broker.security.listeners import parse_items

    parse_items(key, value if value else ",")  # an empty value is one empty (unparsable) item


_LISTENER_PREFIX = re.compile(r"^listener\.name\.[a-z0-9_]+\.(?:(?:plain|scram-sha-256|scram-sha-512|gssapi|"
                              r"oauthbearer)\.)?")
_PRINCIPAL_BUILDER = "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"


def _security_check(key: str, value: str) -> None:
    """Values Kafka accepts that this broker cannot honour: refused rather than silently different."""
    if key == "ssl.principal.mapping.rules" and value.strip() != "DEFAULT":
        raise ConfigError(f"Invalid value {value} for configuration {key}: only DEFAULT is supported "
                          f"(the principal is the certificate's full subject DN)")
    if key == "client.quota.callback.class" and value.strip():
        raise ConfigError(f"Invalid value {value} for configuration {key}: custom quota callbacks are not supported")
    if key == "principal.builder.class" and value.strip() not in ("", _PRINCIPAL_BUILDER):
        raise ConfigError(f"Invalid value {value} for configuration {key}: only {_PRINCIPAL_BUILDER} is supported")
    if key == "listener.security.protocol.map":
        from broker.security.listeners import protocol_map

        protocol_map({"listener.security.protocol.map": value})


def _share_assignors_check(value: str) -> None:
    """``group.share.assignors``: Kafka's list checks and unknown-class message; unlike Kafka (exactly one
    entry) a list of the built-in share assignors is accepted, its first entry being the default."""
    from coordinator.assignors import SHARE_GROUP_ASSIGNORS
    from coordinator.group.config import assignor_names

    key = "group.share.assignors"
    items = [a.strip() for a in value.split(",")]
    if not value.strip():
        raise ConfigError(f"Configuration '{key}' must not be empty. Valid values include: any non-empty value")
    if "" in items:
        raise ConfigError(f"Configuration '{key}' values must not be empty.")
    if len(set(items)) != len(items) or len(set(assignor_names(value))) != len(items):
        raise ConfigError(f"Configuration '{key}' values must not be duplicated.")
    for item, name in zip(items, assignor_names(value)):
        if name not in SHARE_GROUP_ASSIGNORS:
            raise ConfigError(f"Invalid value {value} for configuration {key}: Class {item} cannot be found "
                              f"(share assignors: {', '.join(SHARE_GROUP_ASSIGNORS)})")


def check(key: str, value: str) -> bool:
    """Validate one setting; raise ConfigError if it is known and invalid; False if unknown."""
    base = _LISTENER_PREFIX.sub("", key) if key.startswith("listener.name.") else key
    if base != key and base in BROKER_KEYS:  # a per-listener override: the base key's rules, this key's name
        b = BROKER_KEYS[base]
        cdef = ConfigDef(key, b.type, None, b.minimum, b.maximum, b.choices)
        _security_check(base, value)
        cdef.parse(value)
        return True
    cdef = BROKER_KEYS.get(key)
    if cdef is None:
        syn = _SYNONYMS.get(key)
        if syn is not None:  # a topic-config default: the topic config's rules, the broker key's name
            cdef = ConfigDef(key, syn.type, None, syn.minimum, syn.maximum, syn.choices)
        elif key in ACCEPTED_KEYS or key.startswith(("sharebroker.", "listener.name.", "ssl.", "sasl.")):
            return True
        else:
            return False
    if cdef.type in _TYPE_MESSAGES:
        try:
            cdef.parse(value, check_range=False)
        except ConfigError:
            raise ConfigError(f"Invalid value {value} for configuration {key}: {_TYPE_MESSAGES[cdef.type]}") from None
    cdef.parse(value)
    if key in ("listeners", "advertised.listeners", "sharebroker.metrics.listener"):
        _listener_check(key, value)
    if key == "group.share.assignors":
        _share_assignors_check(value)
    _security_check(key, value)
    return True


def validate(config) -> list[str]:
    """Check every explicitly set key of ``config``; return the unknown ones (raise ConfigError)."""
    unknown = []
    for key, value in config.explicit_items():
        if not check(key, value):
            unknown.append(key)
    _cleaner_check(config)
    _request_bytes_check(config)
    return unknown


def _request_bytes_check(config) -> None:
    """KafkaConfig.validateValues: the request memory pool must hold the largest request a client may send
    (a request bigger than the pool could never be read)."""
    queued = config.get_int("queued.max.request.bytes", -1)
    if 0 < queued < config.get_int("socket.request.max.bytes", 104857600):
        raise ConfigError("requirement failed: queued.max.request.bytes must be larger or equal to "
                          "socket.request.max.bytes")


def _cleaner_check(config) -> None:
    """A dedupe buffer whose share per cleaner thread holds no key: Kafka's ``Cleaner`` asserts it when
    its threads start; here start-up refuses it, rather than each cleaner worker dying on its first log."""
    from broker.log.cleaner.manager import CleanerConfig
    from broker.log.cleaner.offset_map import capacity

    c = CleanerConfig(config)
    if c.enable:
        try:
            capacity(c.dedupe_buffer_size // c.threads, c.load_factor)  # what each worker's OffsetMap takes
        except ValueError as e:
            raise ConfigError(f"Invalid value {c.dedupe_buffer_size} for configuration "
                              f"log.cleaner.dedupe.buffer.size: {e}") from None
