"""The client quota configuration: entities and their quota values, validated and persisted.

An entity is a set of ``(type, name)`` pairs, ``type`` one of ``user``, ``client-id``, ``ip`` and
``name`` None for the ``<default>`` entity of that type (as on the wire and in Kafka's
``ClientQuotaEntity``).  :meth:`ClientQuotaStore.alter` is Kafka's
``ClientQuotaControlManager.alterClientQuotas``: it decides, changing nothing, and returns the
result per entity and the records to apply; :meth:`ClientQuotaStore.replay` applies records (and
is what start-up does with the saved file).  :meth:`ClientQuotaStore.describe` is
``ClientQuotasImage.describe`` (exact, default and "any specified name" filter components,
strict or not).

Persisted as ``<data>/meta/client-quotas.json``, replaced atomically after every change (the
helper SCRAM credentials and group configs use), so a change that was answered survives kill -9.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

from protocol.errors import Errors

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
LONG, INT, DOUBLE = "LONG", "INT", "DOUBLE"
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE = "producer_byte_rate", "consumer_byte_rate"
REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE = "request_percentage", "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# QuotaConfig.userAndClientQuotaConfigs() / ipConfigs(): the keys and their ConfigDef types
USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: LONG, CONSUMER_BYTE_RATE: LONG, REQUEST_PERCENTAGE: DOUBLE,
                    CONTROLLER_MUTATION_RATE: DOUBLE}
IP_KEYS = {CONNECTION_CREATION_RATE: INT}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Entity = tuple  # sorted ((type, name or None), ...)


class QuotaRequestError(Exception):
    """A request-level error of DescribeClientQuotas (``code``, Kafka's message)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Alteration:
    """What AlterClientQuotas decided: one result per distinct entity (request order), and the
    records ``(entity, key, value or None for removal)`` to replay."""

    results: list = field(default_factory=list)  # [(entity pairs as sent, error code, message or None)]
    records: list = field(default_factory=list)


def entity_str(pairs) -> str:
    """``ClientQuotaEntity.toString`` of a Java HashMap built from ``pairs`` (its iteration order)."""
    items: dict = {}
    for t, n in pairs:
        items[t] = n
    cap = 1
    while cap < max(len(pairs), 1):
        cap <<= 1
    while len(items) > int(cap * 0.75) and cap < (1 << 30):
        cap <<= 1

    def bucket(k: str) -> int:
        h = 0
        for ch in k:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    order = [k for _, _, k in sorted((bucket(k), i, k) for i, k in enumerate(items))]
    inner = ", ".join(f"{k}={'null' if items[k] is None else items[k]}" for k in order)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def _check_value(keys: dict, key: str, value: float) -> str | None:
    """``ClientQuotaControlManager.validateQuotaKeyValue``: Kafka's message, or None when valid."""
    kind = keys.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if value <= 0.0:
        return f"Quota {key} must be greater than 0"
    if kind == DOUBLE:
        return None
    if kind == INT and value > (1 << 31) - 1:
        return f"Proposed value for {key} is too large for an INT."
    if kind == LONG and value > float((1 << 63) - 1):
        return f"Proposed value for {key} is too large for a LONG."
    if abs(math.fmod(value, 1.0)) > 1e-6:
        return f"{key} cannot be a fractional value."
    return None


class ClientQuotaStore:
    """Entities and their quota values; the listeners are told every change (the quota managers)."""

    FILE = "client-quotas.json"

    def __init__(self, meta_dir: str | None, background=None):
        self._path = os.path.join(meta_dir, self.FILE) if meta_dir else None
        self.background = background
        # entity -> {key: value}; written only by replay (start-up and AlterClientQuotas)
        self.quotas: dict[Entity, dict[str, float]] = {}
        self._listeners: list = []
        if self._path and os.path.exists(self._path):
            try:
                with open(self._path) as f:
                    data = json.load(f)
                records = [(tuple((t, n) for t, n in e["entity"]), k, float(v))
                           for e in data["entities"] for k, v in e["quotas"].items()]
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise ValueError(f"unreadable client quota file {self._path}: {e}") from None
            self.replay(records, save=False)

    def add_listener(self, fn) -> None:
        """``fn(entity, key, value or None)`` after each applied record (and for the loaded ones: call
        :meth:`replay_to` once when adding a listener after start-up)."""
        self._listeners.append(fn)

    def replay_to(self, fn) -> None:
        for entity, values in self.quotas.items():
            for key, value in values.items():
                fn(entity, key, value)

    # ------------------------------------------------------------------ AlterClientQuotas
    def alter(self, entries, ip_valid=lambda name: True) -> Alteration:
        """Decide ``entries`` (the request's EntryData); nothing changes until :meth:`replay`.

        ``ip_valid(name)`` says whether an ``ip`` entity name is an address or resolvable host.
        """
        out = Alteration()
        results: dict[Entity, tuple] = {}  # entity -> (pairs as sent, code, message); request order
        for entry in entries:
            pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
            entity_map: dict = {}
            for t, n in pairs:  # AlterClientQuotasRequest.entries(): a HashMap, the last name of a type wins
                entity_map[t] = n
            entity = tuple(sorted(entity_map.items(), key=lambda p: p[0]))
            ops: dict = {}
            duplicate = None
            for op in entry.ops:
                if op.key in ops:
                    duplicate = op.key
                else:
                    ops[op.key] = None if op.remove else op.value
            shown = list(entity_map.items())
            if duplicate is not None or entity in results:
                # Kafka overwrites the duplicate-key error with this one too
                results[entity] = (shown, Errors.INVALID_REQUEST, f"Ignoring duplicate entity {entity_str(shown)}")
                continue
            code, message, records = self._alter_entity(entity_map, ops, ip_valid)
            results[entity] = (shown, code, message)
            if not code:
                out.records.extend((entity, k, v) for k, v in records)
        out.results = list(results.values())
        return out

    def _alter_entity(self, entity_map: dict, ops: dict, ip_valid):
        if not entity_map:
            return Errors.INVALID_REQUEST, "Invalid empty client quota entity", []
        for t, n in entity_map.items():
            if t not in ENTITY_TYPES:
                return Errors.INVALID_REQUEST, f"Unhandled client quota entity type: {t}", []
            if n is not None and n == "":
                return Errors.INVALID_REQUEST, f"Empty {t} not supported", []
        if IP in entity_map:
            if USER in entity_map or CLIENT_ID in entity_map:
                return (Errors.INVALID_REQUEST, "Invalid quota entity combination, IP entity should"
                                                "not be combined with User or ClientId", [])
            name = entity_map[IP]
            if name is not None and not ip_valid(name):
                return Errors.INVALID_REQUEST, f"{name} is not a valid IP or resolvable host.", []
            keys = IP_KEYS
        else:
            keys = USER_CLIENT_KEYS
        entity = tuple(sorted(entity_map.items(), key=lambda p: p[0]))
        current = self.quotas.get(entity, {})
        records = []
        for key, value in ops.items():
            if value is None:
                if key in current:
                    records.append((key, None))
                continue
            message = _check_value(keys, key, value)
            if message is not None:
                return Errors.INVALID_REQUEST, message, []
            if current.get(key) != value:
                records.append((key, value))
        return Errors.NONE, None, records

    def replay(self, records, save: bool = True) -> None:
        """Apply ``(entity, key, value or None)`` records and tell the listeners; with ``save`` the
        result is written first, so a failed write (OSError, raised) changes nothing."""
        if save and records and self._path is not None:
            after = {entity: dict(values) for entity, values in self.quotas.items()}
            _apply(after, records)
            self._write(after)
        _apply(self.quotas, records)
        for entity, key, value in records:
            for fn in self._listeners:
                fn(entity, key, value)

    def save(self) -> None:
        if self._path is not None:
            self._write(self.quotas)

    def _write(self, quotas: dict) -> None:
        from broker.log.files import atomic_write

        data = {"version": 1, "entities": [{"entity": [list(p) for p in entity], "quotas": dict(sorted(values.items()))}
                                           for entity, values in sorted(quotas.items(), key=_order)]}
        atomic_write(self._path, json.dumps(data, indent=1).encode(), self.background)

    # ------------------------------------------------------------------ DescribeClientQuotas
    def describe(self, components, strict: bool) -> list[tuple[Entity, dict[str, float]]]:
        """The entities matching the filter, with their values; raises QuotaRequestError."""
        exact: dict = {}
        specified: set = set()
        for c in components:
            t = c.entity_type
            if not t:
                raise QuotaRequestError(Errors.INVALID_REQUEST, "Invalid empty entity type.")
            if t in exact or t in specified:
                raise QuotaRequestError(Errors.INVALID_REQUEST,
                                        f"Entity type {t} cannot appear more than once in the filter.")
            if t not in ENTITY_TYPES:
                raise QuotaRequestError(Errors.UNSUPPORTED_VERSION, f"Unsupported entity type {t}")
            if c.match_type == MATCH_EXACT:
                if c.match is None:
                    raise QuotaRequestError(Errors.INVALID_REQUEST,
                                            "Request specified MATCH_TYPE_EXACT, but set match string to null.")
                exact[t] = c.match
            elif c.match_type == MATCH_DEFAULT:
                if c.match is not None:
                    raise QuotaRequestError(Errors.INVALID_REQUEST,
                                            "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
                exact[t] = None
            elif c.match_type == MATCH_SPECIFIED:
                if c.match is not None:
                    raise QuotaRequestError(Errors.INVALID_REQUEST,
                                            "Request specified MATCH_TYPE_SPECIFIED, but also specified a match "
                                            "string.")
                specified.add(t)
            else:
                raise QuotaRequestError(Errors.INVALID_REQUEST, f"Unknown match type {c.match_type}")
        if (IP in exact or IP in specified) and (USER in exact or USER in specified or CLIENT_ID in exact
                                                  or CLIENT_ID in specified):
            raise QuotaRequestError(Errors.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                                                            "component should not be used with user or clientId "
                                                            "filter component.")
        out = []
        for entity, values in sorted(self.quotas.items(), key=_order):
            names = dict(entity)
            if not exact and not specified:
                if strict:
                    continue  # a strict empty filter matches nothing (ClientQuotasImage)
            elif any(t not in names or names[t] != n for t, n in exact.items()) or any(
                    t not in names for t in specified):
                continue
            elif strict and len(names) != len(exact) + len(specified):
                continue
            out.append((entity, dict(sorted(values.items()))))
        return out


def _order(item) -> tuple:
    """A stable order of entities for answers and the file: by types, then names (the default first)."""
    entity = item[0]
    return tuple((t, n is not None, n or "") for t, n in entity)


def _apply(quotas: dict, records) -> None:
    for entity, key, value in records:
        values = quotas.setdefault(entity, {})
        if value is None:
            values.pop(key, None)
            if not values:
                del quotas[entity]
        else:
            values[key] = value
