"""Compare a response from the reference Kafka with ours, field by field.

``plain(obj)`` turns a decoded message (our generated codec) into dicts / lists / scalars, with what
must differ between two brokers normalised by field name (cluster and topic ids, member and producer
ids, node ids, hosts and ports, leader epochs, timestamps, throttle times) and error messages compared as
null / empty / present (their wording is ours, not Kafka's); ``differences(ours, kafka)`` lists the
paths where they still differ, as ``"path: ours=... kafka=..."``.
"""
from __future__ import annotations

from protocol.primitives import ZERO_UUID

_NODE_FIELDS = {"node_id", "leader_id", "controller_id", "broker_id"}
_NODE_LISTS = {"replica_nodes", "isr_nodes", "offline_replicas", "eligible_leader_replicas", "last_known_elr",
               "broker_ids"}
_SAME = {
    "throttle_time_ms": 0,
    "cluster_id": "<cluster-id>",
    "host": "<host>",
    "port": "<port>",
    "leader_epoch": "<leader-epoch>",
    "finalized_features_epoch": "<features-epoch>",
}


def _uuid(value):
    if value in (None, ZERO_UUID, b"\0" * 16):
        return value if value is None else "<zero-uuid>"
    return "<uuid>"


def normalise(name: str, value):
    if name in _SAME:
        return value if value is None else _SAME[name]
    if name.endswith("topic_id") or name == "incarnation_id":
        return _uuid(value)
    if name == "member_id":
        return value if not value else "<member-id>"
    if name == "producer_id":
        return value if value < 0 else "<producer-id>"
    if name in _NODE_FIELDS:
        return value if value is None or value < 0 else "<node>"
    if name in _NODE_LISTS and isinstance(value, list):
        return ["<node>" for _ in value]
    if "timestamp" in name:
        return "<timestamp>"
    if name.endswith("error_message") and value:
        return "<message>"
    return value


def plain(obj, name: str = ""):
    if hasattr(obj, "__slots__") and hasattr(obj, "_unknown_tagged_fields"):
        return {s: normalise(s, plain(getattr(obj, s), s)) for s in obj.__slots__ if s != "_unknown_tagged_fields"}
    if isinstance(obj, (list, tuple)):
        return [plain(v, name) for v in obj]
    if isinstance(obj, memoryview):
        return bytes(obj)
    return obj


def differences(ours, kafka, path: str = "") -> list[str]:
    """Paths where ``ours`` and ``kafka`` (already plain) differ: a dict key present on one side only,
    a list of another length, a scalar of another value."""
    if isinstance(ours, dict) and isinstance(kafka, dict):
        out = []
        for key in sorted(set(ours) | set(kafka), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in ours:
                out.append(f"{sub}: ours=<absent> kafka={_short(kafka[key])}")
            elif key not in kafka:
                out.append(f"{sub}: ours={_short(ours[key])} kafka=<absent>")
            else:
                out += differences(ours[key], kafka[key], sub)
        return out
    if isinstance(ours, list) and isinstance(kafka, list):
        if len(ours) != len(kafka):
            return [f"{path}: ours={_short(ours)} kafka={_short(kafka)}"]
        out = []
        for i, (a, b) in enumerate(zip(ours, kafka)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    return [] if ours == kafka else [f"{path}: ours={_short(ours)} kafka={_short(kafka)}"]


def _short(value, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def path_of(difference: str) -> str:
    return difference.split(": ours=", 1)[0]
