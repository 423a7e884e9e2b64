"""Kafka 4.4's APIs, read from its message schemas, and the ones sharebroker deliberately does not serve.

A schema's ``listeners`` say where a Kafka node serves the API: ``broker`` (what clients and tools
reach, so what ApiVersions on a broker advertises), ``controller`` (the KRaft controller listener
only); the four ZooKeeper-era APIs have no listener and ``validVersions`` "none" since Kafka 4.0.  A
version above ``latestVersionUnstable``'s stable range is not advertised by Kafka without
``unstable.api.versions.enable``, so the stable maximum is what a Kafka 4.4 broker answers.

Every API key of the reference schemas is either served at Kafka's versions
(tests/integration/test_api_versions.py checks it against ApiVersions) or listed below with the reason;
docs/apis.md's "Kafka 4.4's client APIs" table says the same.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
# The jars whose common/message/*.json are Kafka's message schemas, and the prefix their files get here (the
# coordinators' record schemas are ``coordinator-``, as tools/import_schemas.py names them).
SCHEMA_JARS = {"kafka-clients": "", "kafka-group-coordinator": "coordinator-",
               "kafka-share-coordinator": "coordinator-", "kafka-transaction-coordinator": "coordinator-"}


def reference_dir() -> Path:
    """Apache Kafka 4.4.0's message schemas, as Kafka ships them inside its jars (tests/kafka_ref/schemas-pom.xml),
    resolved from Maven Central the first time and extracted into the reference Kafka's cache. Without Maven
    the calling test is skipped as missing its input (a failure under CI); a Maven failure is an error."""
    from tests.kafka_ref.launcher import SCHEMAS_POM, cache_dir, classpath, missing_tools
    from tests.missing_inputs import missing_input

    out = cache_dir() / "message-schemas"
    if (out / "RequestHeader.json").is_file():
        return out
    if missing_tools():  # what tests/kafka_ref's resolution checks for
        missing_input(f"Kafka's message schemas are resolved by tests/kafka_ref ({SCHEMAS_POM.name}), which needs "
                      f"{' and '.join(missing_tools())}")
    jars = classpath(pom=SCHEMAS_POM, name="schemas-classpath.txt").split(os.pathsep)
    tmp = Path(tempfile.mkdtemp(dir=cache_dir(), prefix="message-schemas-tmp-"))
    for jar in jars:
        prefix = SCHEMA_JARS[Path(jar).name.rsplit("-", 1)[0]]
        with zipfile.ZipFile(jar) as z:
            for name in z.namelist():
                if name.startswith("common/message/") and name.endswith(".json"):
                    (tmp / (prefix + name.rsplit("/", 1)[1])).write_bytes(z.read(name))
    try:
        tmp.rename(out)
    except OSError:  # another test worker extracted them first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# Served on a Kafka 4.4 broker listener, not here: inter-broker, with no client-facing use.
NOT_SERVED_BROKER_APIS: dict[int, tuple[str, str]] = {
    27: ("WriteTxnMarkers", "broker-to-broker: a transaction coordinator asks partition leaders to write "
                            "commit/abort markers (CLUSTER_ACTION); here the coordinator writes them into its "
                            "own partitions directly"),
}

_QUORUM = "the KRaft quorum among controllers: sharebroker is one node with no metadata log"
# Served by Kafka 4.4 only on the controller listener (or nowhere), so a Kafka broker does not advertise them.
CONTROLLER_ONLY: dict[int, tuple[str, str]] = {
    4: ("LeaderAndIsr", "ZooKeeper mode, removed in Kafka 4.0"),
    5: ("StopReplica", "ZooKeeper mode, removed in Kafka 4.0"),
    6: ("UpdateMetadata", "ZooKeeper mode, removed in Kafka 4.0"),
    7: ("ControlledShutdown", "ZooKeeper mode, removed in Kafka 4.0"),
    52: ("Vote", _QUORUM),
    53: ("BeginQuorumEpoch", _QUORUM),
    54: ("EndQuorumEpoch", _QUORUM),
    56: ("AlterPartition", "a leader reporting ISR changes to the controller: one replica, no ISR changes"),
    58: ("Envelope", "a broker forwarding a request to the controller: this node is its own controller"),
    59: ("FetchSnapshot", _QUORUM),
    62: ("BrokerRegistration", "a broker registering with the controller: this node is its own controller"),
    63: ("BrokerHeartbeat", "a broker's liveness to the controller: this node is its own controller"),
    67: ("AllocateProducerIds", "a broker's producer-id blocks from the controller: allocated locally"),
    70: ("ControllerRegistration", "a controller registering in the metadata log: no metadata log"),
    73: ("AssignReplicasToDirs", "a broker telling the controller its replicas' log dirs (JBOD): one data dir"),
    82: ("UpdateRaftVoter", _QUORUM),
}


def not_served() -> dict[int, tuple[str, str]]:
    """Every API key of Kafka 4.4 that sharebroker does not advertise, with its name and the reason."""
    return {**NOT_SERVED_BROKER_APIS, **CONTROLLER_ONLY}


class Api(NamedTuple):
    key: int
    name: str
    listeners: tuple[str, ...]
    min_version: int | None  # None: no valid version (removed)
    max_version: int | None  # the highest stable version


def reference_apis() -> dict[int, Api]:
    """Every request schema of the reference set, by API key."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_import_schemas", ROOT / "tools" / "import_schemas.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = {}
    for path in sorted(reference_dir().glob("*Request.json")):
        schema = json.loads(tool.strip_comments(path.read_text()))
        if schema.get("type") != "request":
            continue
        valid = schema["validVersions"]
        lo = hi = None
        if valid != "none":
            lo, _, top = valid.partition("-")
            lo, hi = int(lo), int(top or lo)
            if schema.get("latestVersionUnstable"):
                hi -= 1
        out[schema["apiKey"]] = Api(schema["apiKey"], schema["name"].removesuffix("Request"),
                                    tuple(schema.get("listeners") or ()), lo, hi)
    return out


def broker_apis() -> dict[int, Api]:
    """The APIs a Kafka 4.4 broker listener serves: the client-facing ones."""
    return {k: a for k, a in reference_apis().items() if "broker" in a.listeners and a.max_version is not None}
