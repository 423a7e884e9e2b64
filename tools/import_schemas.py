"""Write schemas/ from Apache Kafka's message definitions, keeping only protocol facts.

Usage: python3 tools/import_schemas.py [REFERENCE_DIR]

REFERENCE_DIR defaults to Kafka 4.4.0's schemas as its jars ship them (``tests/kafka_apis.reference_dir``:
resolved from Maven Central).

Comments, ``about`` prose and licence headers are dropped; names, types, versions,
tags, defaults and nullability are kept as they are.  The list of schemas we carry
is ``WANTED`` below (every API in ARCHITECTURE.md plus the coordinator records).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

APIS = [
    "ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "FindCoordinator",
    "InitProducerId", "CreateTopics", "DeleteTopics", "CreatePartitions", "DeleteRecords",
    "DescribeConfigs", "IncrementalAlterConfigs", "ListConfigResources", "DescribeCluster",
    "ListGroups", "DescribeGroups", "DeleteGroups", "JoinGroup", "SyncGroup", "Heartbeat",
    "LeaveGroup", "OffsetCommit", "OffsetFetch", "OffsetDelete", "ConsumerGroupHeartbeat",
    "ConsumerGroupDescribe", "ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch",
    "ShareAcknowledge", "DescribeShareGroupOffsets", "AlterShareGroupOffsets",
    "DeleteShareGroupOffsets", "InitializeShareGroupState", "ReadShareGroupState",
    "WriteShareGroupState", "DeleteShareGroupState", "ReadShareGroupStateSummary",
    "SaslHandshake", "SaslAuthenticate", "CreateAcls", "DescribeAcls", "DeleteAcls",
    "DescribeUserScramCredentials", "AlterUserScramCredentials",
    "AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit", "EndTxn", "DescribeTransactions",
    "ListTransactions", "DescribeProducers", "DescribeClientQuotas", "AlterClientQuotas",
    "AlterConfigs", "DescribeLogDirs", "AlterReplicaLogDirs", "OffsetForLeaderEpoch",
    "DescribeTopicPartitions", "ElectLeaders", "AlterPartitionReassignments",
    "ListPartitionReassignments", "DescribeQuorum", "UpdateFeatures",
    "UnregisterBroker", "UnregisterController", "AddRaftVoter", "RemoveRaftVoter",
    "CreateDelegationToken", "RenewDelegationToken", "ExpireDelegationToken", "DescribeDelegationToken",
    "GetTelemetrySubscriptions", "PushTelemetry",
    "StreamsGroupHeartbeat", "StreamsGroupDescribe", "StreamsGroupTopologyDescriptionUpdate",
]
OTHERS = ["RequestHeader", "ResponseHeader", "ConsumerProtocolAssignment",
          "ConsumerProtocolSubscription"]
RECORDS = [
    "ShareSnapshot", "ShareUpdate", "ShareGroupMetadata", "ShareGroupMemberMetadata",
    "ShareGroupTargetAssignmentMetadata", "ShareGroupTargetAssignmentMember",
    "ShareGroupCurrentMemberAssignment", "ShareGroupStatePartitionMetadata",
    "ConsumerGroupMetadata", "ConsumerGroupMemberMetadata", "ConsumerGroupPartitionMetadata",
    "ConsumerGroupTargetAssignmentMetadata", "ConsumerGroupTargetAssignmentMember",
    "ConsumerGroupCurrentMemberAssignment", "ConsumerGroupRegularExpression",
    "OffsetCommit", "LegacyOffsetCommit", "GroupMetadata", "TransactionLog",
    "StreamsGroupMetadata", "StreamsGroupMemberMetadata", "StreamsGroupTopology",
    "StreamsGroupTargetAssignmentMetadata", "StreamsGroupTargetAssignmentMember",
    "StreamsGroupCurrentMemberAssignment",
]


def wanted_files() -> list[str]:
    names = [f"{a}{kind}.json" for a in APIS for kind in ("Request", "Response")]
    names += [f"{o}.json" for o in OTHERS]
    names += [f"coordinator-{r}{kind}.json" for r in RECORDS for kind in ("Key", "Value")]
    return names


def strip_comments(text: str) -> str:
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def facts(node):
    if isinstance(node, dict):
        return {k: facts(v) for k, v in node.items() if k != "about"}
    if isinstance(node, list):
        return [facts(v) for v in node]
    return node


def load_reference(path: Path) -> dict:
    return facts(json.loads(strip_comments(path.read_text())))


def main() -> None:
    if len(sys.argv) > 1:
        ref = Path(sys.argv[1])
    else:
        sys.path.insert(0, str(ROOT))
        from tests.kafka_apis import reference_dir

        ref = reference_dir()
    out_dir = ROOT / "schemas"
    out_dir.mkdir(exist_ok=True)
    for name in wanted_files():
        data = load_reference(ref / name)
        target = out_dir / name.removeprefix("coordinator-")
        target.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {len(wanted_files())} schemas to {out_dir}")


if __name__ == "__main__":
    main()
