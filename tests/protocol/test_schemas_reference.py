"""Our schemas/ must carry exactly the protocol facts of Apache Kafka's schemas.

The reference copies are Kafka 4.4.0's own, from the jars it publishes on Maven Central
(``tests/kafka_apis.reference_dir``; coordinator record schemas there are prefixed
``coordinator-``).  Everything except ``about`` prose and comments must be equal; our
files must hold no prose, comment or licence.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
OUR_FILES = sorted(p.name for p in SCHEMAS.glob("*.json"))


def _import_schemas_tool():
    spec = importlib.util.spec_from_file_location("_import_schemas", ROOT / "tools" / "import_schemas.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


import_schemas = _import_schemas_tool()


def _reference_path(reference: Path, name: str) -> Path:
    plain = reference / name
    prefixed = reference / f"coordinator-{name}"
    ours = json.loads((SCHEMAS / name).read_text())
    if ours.get("type", "").startswith("coordinator-"):
        return prefixed
    return plain


def _keys(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield k
            yield from _keys(v)
    elif isinstance(node, list):
        for v in node:
            yield from _keys(v)


def test_schema_set_is_the_one_we_import():
    wanted = {n.removeprefix("coordinator-") for n in import_schemas.wanted_files()}
    assert set(OUR_FILES) == wanted


@pytest.fixture(scope="module")
def reference() -> Path:
    from tests.kafka_apis import reference_dir

    return reference_dir()


@pytest.mark.parametrize("name", OUR_FILES)
def test_schema_matches_reference(reference, name):
    ref = _reference_path(reference, name)
    assert ref.is_file(), f"no reference schema for {name} ({ref.name})"
    ours = json.loads((SCHEMAS / name).read_text())
    theirs = import_schemas.load_reference(ref)
    assert ours == theirs


@pytest.mark.parametrize("name", OUR_FILES)
def test_schema_is_facts_only(name):
    text = (SCHEMAS / name).read_text()
    data = json.loads(text)  # plain JSON: a // comment would not parse
    assert import_schemas.strip_comments(text) == text, "comment in schema file"
    assert "about" not in set(_keys(data))
    lowered = text.lower()
    for word in ("licensed to the apache", "apache license", "license", "copyright", "http://", "https://"):
        assert word not in lowered, f"{word!r} in {name}"


def test_comment_stripping_and_fact_extraction_work():
    # the comparison above is only as good as the loader; make sure it can fail
    src = '{\n  // Licensed to the Apache Software Foundation\n  "name": "X", "about": "a // b",\n' \
          '  "fields": [{"name": "A", "type": "int8", "versions": "0+", "about": "x"}]\n}\n'
    facts = import_schemas.facts(json.loads(import_schemas.strip_comments(src)))
    assert facts == {"name": "X", "fields": [{"name": "A", "type": "int8", "versions": "0+"}]}
