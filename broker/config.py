"""Broker configuration with Kafka property names.

Values come, in increasing priority, from built-in defaults, a Kafka-style
``.properties`` file (``--config``) and ``--set key=value`` overrides.  Components
read what they need with typed getters and their own defaults.  What was set
explicitly is kept apart from the built-in defaults: ``has()`` is true only for an
explicit setting, so DescribeConfigs reports a default as DEFAULT_CONFIG, as Kafka
does.  ``broker.config_keys`` validates the explicit settings at start-up (an unknown
key is logged, not fatal, as in Kafka).
"""
from __future__ import annotations

from pathlib import Path

# Defaults the broker itself reads (components keep their own next to their code).
DEFAULTS: dict[str, str] = {
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "log.dirs": "./data",
    "node.id": "1",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "default.replication.factor": "1",
    "socket.request.max.bytes": str(100 * 1024 * 1024),
    "max.connections": "2147483647",
    "message.max.bytes": "1048588",
    "log.retention.check.interval.ms": "300000",
    "delete.topic.enable": "true",
}


def parse_properties(text: str) -> dict[str, str]:
    """Parse the subset of java.util.Properties syntax Kafka config files use."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                key, value = line[:i].strip(), line[i + 1:].strip()
                break
            if ch.isspace():
                key, value = line[:i].strip(), line[i:].strip().lstrip("=:").strip()
                break
        else:
            key, value = line, ""
        out[key] = value
    return out


class BrokerConfig:
    """Kafka-named settings with typed access."""

    def __init__(self, values: dict[str, str] | None = None):
        self._explicit: dict[str, str] = {k: str(v) for k, v in (values or {}).items()}
        self._values: dict[str, str] = {**DEFAULTS, **self._explicit}

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: dict[str, str] | None = None) -> "BrokerConfig":
        values: dict[str, str] = {}
        if path:
            values.update(parse_properties(Path(path).read_text()))
        if overrides:
            values.update(overrides)
        return cls(values)

    def set(self, key: str, value) -> None:
        self._explicit[key] = self._values[key] = str(value)

    def has(self, key: str) -> bool:
        """True when ``key`` was set explicitly (a file, ``--set``, a flag), not by a built-in default."""
        return key in self._explicit

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._values.get(key, default)

    def get_int(self, key: str, default: int = 0) -> int:
        v = self._values.get(key)
        return default if v is None or v == "" else int(v)

    def get_float(self, key: str, default: float = 0.0) -> float:
        v = self._values.get(key)
        return default if v is None or v == "" else float(v)

    def get_bool(self, key: str, default: bool = False) -> bool:
        v = self._values.get(key)
        return default if v is None or v == "" else v.strip().lower() == "true"

    def items(self):
        """Every setting in effect: explicit ones and built-in defaults."""
        return self._values.items()

    def explicit_items(self):
        return self._explicit.items()

    def is_builtin_default(self, key: str) -> bool:
        return key in DEFAULTS and key not in self._explicit
