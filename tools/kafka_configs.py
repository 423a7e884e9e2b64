"""Write ``broker/kafka_configs.json``: Kafka 4.4's own topic and broker config definitions.

    python -m tools.kafka_configs            # rewrite the table from the Kafka 4.4.0 jars
    python -m tools.kafka_configs --check    # exit 1 when the committed table differs from the jars

The jars are the reference Kafka's (``tests/kafka_ref``, resolved by Maven); the dump is made by Kafka
itself (``tests/kafka_ref/java/ConfigDump.java``: ``LogConfig.configDefCopy()``,
``KafkaConfig.configDef()``, ``ServerTopicConfigSynonyms``, ``DynamicBrokerConfig``), so names, types,
defaults and validators are Kafka's, not transcribed. Kafka's internal configs are left out (Kafka
does not describe them). Needs ``java`` and ``mvn``; the broker only reads the committed table.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "broker" / "kafka_configs.json"
SOURCE = ROOT / "tests" / "kafka_ref" / "java" / "ConfigDump.java"


def _rows(keys: list[dict]) -> dict[str, list]:
    """name -> [type, default, validator, importance]; the default is the string Kafka prints
    (``None`` for a null default, ``"<none>"`` when the config has no default at all)."""
    return {k["name"]: [k["type"], k["default"], k["validator"], k["importance"]] for k in keys if not k["internal"]}


def dump() -> dict:
    """Kafka's definitions as the table stores them (runs a small JVM)."""
    from tests.kafka_ref.launcher import classpath, compiled

    cp = classpath()
    classes = compiled([SOURCE], cp, "config-dump")
    done = subprocess.run(["java", "-Xmx256m", "-cp", f"{classes}:{cp}", "ConfigDump"], capture_output=True,
                          text=True, timeout=300, check=True)
    raw = json.loads(done.stdout)
    return {"kafka_version": "4.4.0", "topic": _rows(raw["topic"]), "broker": _rows(raw["broker"]),
            "topic_synonyms": raw["topic_synonyms"], "dynamic_broker": raw["dynamic"],
            "dynamic_security": raw["dynamic_security"]}


def render(table: dict) -> str:
    """One config a line, so a Kafka upgrade shows as a readable diff."""
    parts = []
    for section in sorted(table):
        value = table[section]
        if isinstance(value, dict):
            rows = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(value.items()))
            parts.append(f"{json.dumps(section)}: {{\n{rows}\n}}")
        else:
            parts.append(f"{json.dumps(section)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main(argv: list[str]) -> int:
    text = render(dump())
    if "--check" in argv:
        if TABLE.read_text() != text:
            print(f"{TABLE} is stale: run python -m tools.kafka_configs", file=sys.stderr)
            return 1
        return 0
    TABLE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
